"""The Vega-Lite specs the overview and task pages draw: valid against the Vega-Lite schema, data as intended."""

from __future__ import annotations

import jsonschema
import numpy as np
import pandas as pd
import pytest
from altair.vegalite.v6.schema import load_schema

from explorer.components.charts import (
    OTHER_COLOUR,
    STATUS_COLOURS,
    bar_counts,
    fast_p_chart,
    log_histogram,
    runtime_speedup_scatter,
)


@pytest.fixture(scope="module")
def validator():
    schema = load_schema()
    return jsonschema.validators.validator_for(schema)(schema)


def assert_valid(validator, chart):
    # The spec as st.vega_lite_chart completes it: the chart's data inlined at the top level.
    spec = {**chart.spec, "data": {"values": chart.data.astype(object).to_dict("records")}}
    errors = [e.message for e in validator.iter_errors(spec)]
    assert errors == []


def test_bar_counts_stack_statuses_in_fixed_colours(validator):
    frame = pd.DataFrame(
        {
            "model": ["m1", "m1", None, "m2"],
            "status": ["incorrect", "correct", "correct", "novel_status"],
            "kernels": [3, 5, 2, 1],
        }
    )
    chart = bar_counts(frame, "model", "status", "Kernels by model")
    assert_valid(validator, chart)
    scale = chart.spec["encoding"]["color"]["scale"]
    assert scale["domain"] == ["correct", "incorrect", "novel_status"]  # pipeline order, unknown last
    assert scale["range"] == [STATUS_COLOURS["correct"], STATUS_COLOURS["incorrect"], OTHER_COLOUR]
    assert list(chart.data["model"]) == ["m1", "m1", "(none)", "m2"]
    assert chart.data["kernels"].sum() == 11


def test_log_histogram_bins_every_positive_value(validator):
    values = np.array([0.5, 1.0, 2.0, 2.5, 10.0, 0.0, -1.0])
    chart = log_histogram(values, "Speedup", bins=6)
    assert_valid(validator, chart)
    assert len(chart.data) == 6 and chart.data["kernels"].sum() == 5  # zero and negative values left out
    assert chart.data["from"].iloc[0] == pytest.approx(0.5) and chart.data["to"].iloc[-1] == pytest.approx(10.0)
    rule = chart.spec["layer"][1]
    assert rule["mark"]["type"] == "rule" and rule["data"]["values"] == [{"x": 1.0}]


def test_fast_p_chart_one_line_per_baseline(validator):
    curve = pd.DataFrame({"p": [0.0, 1.0, 2.0], "fast_p": [1.0, 0.5, 0.0]})
    chart = fast_p_chart({"vs eager": curve, "vs torch.compile": curve.assign(fast_p=[0.8, 0.2, 0.0])})
    assert_valid(validator, chart)
    assert chart.data.groupby("baseline").size().to_dict() == {"vs eager": 3, "vs torch.compile": 3}


def test_runtime_speedup_scatter_drops_untimed_kernels(validator):
    kernels = pd.DataFrame(
        {
            "kernel_name": ["a<b>", "b", "c", "d"],
            "status": ["correct", "correct", "incorrect", "correct"],
            "runtime_ms": [0.5, None, 1.0, 0.0],
            "speedup_eager": [2.0, 1.0, None, 3.0],
        }
    )
    chart = runtime_speedup_scatter(kernels, "Runtime vs speedup")
    assert_valid(validator, chart)
    assert list(chart.data["kernel"]) == ["a<b>"]  # archive text stays data, unescaped and unrendered
    assert runtime_speedup_scatter(kernels.iloc[1:3], "empty").data.empty
