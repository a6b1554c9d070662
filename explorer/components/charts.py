"""Vega-Lite charts shared by the overview and task pages; data arrives pre-aggregated from the query layer.

The map alone is Plotly (one WebGL scatter with lasso selection). These small charts are Vega-Lite because its
frontend loads and draws them in about half Plotly's time in a software-rendered browser (five charts: 2.4 s vs
4.8 s on the 2-core benchmark box), and the overview is the page every visit starts on. The specs are plain
Vega-Lite JSON handed to `st.vega_lite_chart`: building them with Altair would cost each server ~0.4 s of import
and schema loading on its first page; the tests validate every spec against Altair's copy of the Vega-Lite schema.
Archive text only ever travels as data values, which Vega draws as text, never as markup or expressions.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import streamlit as st

STATUS_COLOURS = {
    "correct": "#2e7d32",
    "incorrect": "#c62828",
    "compile_error": "#6a1b9a",
    "runtime_error": "#ef6c00",
    "timeout": "#546e7a",
    "crash": "#212121",
}
OTHER_COLOUR = "#9e9e9e"
CHART_HEIGHT = 300
MISSING = "(none)"


class Chart(NamedTuple):
    """What `st.vega_lite_chart(chart.data, chart.spec)` draws."""

    data: pd.DataFrame
    spec: dict[str, Any]


def show(chart: Chart, key: str) -> None:
    """Draw a chart in the current container (a column, the page) at its width."""
    st.vega_lite_chart(chart.data, chart.spec, key=key, width="stretch")


def status_scale(values) -> dict[str, list[str]]:
    """The same colour for a status on every chart, statuses in pipeline order, unknown ones grey at the end."""
    order = list(STATUS_COLOURS)
    present = sorted(set(values), key=lambda v: (order.index(v) if v in order else len(order), v))
    return {"domain": present, "range": [STATUS_COLOURS.get(v, OTHER_COLOUR) for v in present]}


def bar_counts(frame: pd.DataFrame, x: str, stack: str, title: str) -> Chart:
    """Stacked bars of `kernels` per `x` value, stacked by `stack` (statuses get their fixed colours)."""
    data = pd.DataFrame(
        {
            x: frame[x].astype("string").fillna(MISSING),
            stack: frame[stack].astype("string").fillna(MISSING),
            "kernels": frame["kernels"].astype(int),
        }
    )
    colour: dict[str, Any] = {"field": stack, "type": "nominal", "title": stack}
    if stack == "status":
        colour["scale"] = status_scale(data[stack])
    spec = {
        "title": title,
        "height": CHART_HEIGHT,
        "width": "container",  # a discrete axis would otherwise size the chart by its bar count
        "mark": {"type": "bar"},
        "encoding": {
            "x": {"field": x, "type": "nominal", "title": x, "sort": None},
            "y": {"field": "kernels", "type": "quantitative", "aggregate": "sum", "title": "kernels"},
            "color": colour,
            "tooltip": [
                {"field": x, "type": "nominal"},
                {"field": stack, "type": "nominal"},
                {"field": "kernels", "type": "quantitative", "aggregate": "sum", "title": "kernels"},
            ],
        },
    }
    return Chart(data, spec)


def log_histogram(values: np.ndarray, title: str, bins: int = 60) -> Chart:
    """Histogram of positive values on a log axis, binned here so the browser gets `bins` bars, not every value;
    a dashed rule marks 1x."""
    logs = np.log10(values[values > 0])
    counts, edges = np.histogram(logs, bins=bins)
    data = pd.DataFrame({"from": 10 ** edges[:-1], "to": 10 ** edges[1:], "kernels": counts.astype(int)})
    bars = {  # a rect per bin, from its edges and from zero up to its count
        "mark": {"type": "rect", "color": "#1565c0"},
        "encoding": {
            "x": {"field": "from", "type": "quantitative", "scale": {"type": "log"}, "title": "speedup (x)"},
            "x2": {"field": "to"},
            "y": {"field": "kernels", "type": "quantitative", "title": "kernels"},
            "y2": {"datum": 0},
            "tooltip": [
                {"field": "from", "type": "quantitative", "format": ".3g", "title": "from (x)"},
                {"field": "to", "type": "quantitative", "format": ".3g", "title": "to (x)"},
                {"field": "kernels", "type": "quantitative"},
            ],
        },
    }
    one = {
        "data": {"values": [{"x": 1.0}]},
        "mark": {"type": "rule", "color": "grey", "strokeDash": [4, 4]},
        "encoding": {"x": {"field": "x", "type": "quantitative"}},
    }
    return Chart(data, {"title": title, "height": CHART_HEIGHT, "layer": [bars, one]})


def fast_p_chart(curves: dict[str, pd.DataFrame]) -> Chart:
    """fast_p curves (share of tasks with a correct kernel faster than p x baseline), one line per baseline."""
    data = pd.concat(
        [pd.DataFrame({"p": c["p"], "fast_p": c["fast_p"], "baseline": name}) for name, c in curves.items()],
        ignore_index=True,
    )
    spec = {
        "height": CHART_HEIGHT,
        "mark": {"type": "line"},
        "encoding": {
            "x": {"field": "p", "type": "quantitative", "title": "p (speedup threshold)"},
            "y": {
                "field": "fast_p",
                "type": "quantitative",
                "title": "share of tasks",
                "axis": {"format": "%"},
                "scale": {"domain": [0, 1]},
            },
            "color": {"field": "baseline", "type": "nominal", "title": None},
            "tooltip": [
                {"field": "baseline", "type": "nominal"},
                {"field": "p", "type": "quantitative", "format": ".2f"},
                {"field": "fast_p", "type": "quantitative", "format": ".1%", "title": "fast_p"},
            ],
        },
    }
    return Chart(data, spec)


def runtime_speedup_scatter(kernels: pd.DataFrame, title: str) -> Chart:
    """Timed kernels of a task: runtime vs speedup over eager, both on log axes, coloured by status."""
    timed = kernels.dropna(subset=["runtime_ms", "speedup_eager"])
    timed = timed[(timed["runtime_ms"] > 0) & (timed["speedup_eager"] > 0)]
    data = pd.DataFrame(
        {
            "kernel": timed["kernel_name"].astype("string"),
            "status": timed["status"].astype("string"),
            "runtime_ms": timed["runtime_ms"].astype(float),
            "speedup_eager": timed["speedup_eager"].astype(float),
        }
    )
    log = {"type": "log"}
    spec = {
        "title": title,
        "height": CHART_HEIGHT,
        "mark": {"type": "circle", "size": 40, "opacity": 0.8},
        "encoding": {
            "x": {"field": "runtime_ms", "type": "quantitative", "scale": log, "title": "runtime (ms)"},
            "y": {"field": "speedup_eager", "type": "quantitative", "scale": log, "title": "speedup vs eager"},
            "color": {"field": "status", "type": "nominal", "scale": status_scale(data["status"])},
            "tooltip": [
                {"field": "kernel", "type": "nominal"},
                {"field": "runtime_ms", "type": "quantitative", "format": ".4f"},
                {"field": "speedup_eager", "type": "quantitative", "format": ".2f", "title": "speedup"},
            ],
        },
    }
    return Chart(data, spec)
