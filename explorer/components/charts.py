"""Plotly figures shared by pages (data arrives pre-aggregated from the query layer)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

STATUS_COLOURS = {
    "correct": "#2e7d32",
    "incorrect": "#c62828",
    "compile_error": "#6a1b9a",
    "runtime_error": "#ef6c00",
    "timeout": "#546e7a",
    "crash": "#212121",
}


def bar_counts(frame: pd.DataFrame, x: str, stack: str, title: str) -> go.Figure:
    figure = go.Figure()
    for value, part in frame.groupby(stack, dropna=False, sort=True):
        figure.add_trace(
            go.Bar(
                x=plotly_text(part[x]),
                y=part["kernels"],
                name=escape_plotly(str(value)),
                marker_color=STATUS_COLOURS.get(str(value)),
            )
        )
    figure.update_layout(barmode="stack", title=title, height=340, margin=dict(t=40, b=40), xaxis_type="category")
    return figure


def log_histogram(values: np.ndarray, title: str, bins: int = 60) -> go.Figure:
    """Histogram on a log axis, binned here so the browser gets ~60 bars instead of every value."""
    logs = np.log10(values[values > 0])
    counts, edges = np.histogram(logs, bins=bins)
    centres = 10 ** ((edges[:-1] + edges[1:]) / 2)
    widths = 10 ** edges[1:] - 10 ** edges[:-1]
    figure = go.Figure(go.Bar(x=centres, y=counts, width=widths, marker_color="#1565c0"))
    figure.add_vline(x=1.0, line_dash="dash", line_color="grey")
    figure.update_layout(
        title=title,
        xaxis_type="log",
        xaxis_title="speedup (x)",
        yaxis_title="kernels",
        height=320,
        margin=dict(t=40, b=40),
    )
    return figure


def plotly_text(values: pd.Series) -> np.ndarray:
    """Archive text for Plotly hover/annotation text, which understands a subset of HTML tags: escape it."""
    return values.astype(str).str.replace("&", "&amp;").str.replace("<", "&lt;").str.replace(">", "&gt;").to_numpy()


def escape_plotly(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
