"""The map's figure and the shapes read from a Plotly selection event."""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.components.map_view import map_figure, marker_size, selection_shapes


def test_box_and_lasso_become_polygons_and_broken_shapes_are_skipped():
    selection = {
        "box": [{"xref": "x", "yref": "y", "x": [1.0, 3.0], "y": [-1.0, 2.0]}, {"x": [], "y": []}],
        "lasso": [{"x": [0, 1, 1], "y": [0, 0, 1]}, {"x": [0, 1], "y": [0, 1]}, {"x": [0, 1, 2], "y": [0, 1]}],
    }
    assert selection_shapes(selection) == [
        ([1.0, 3.0, 3.0, 1.0], [-1.0, -1.0, 2.0, 2.0]),
        ([0, 1, 1], [0, 0, 1]),
    ]
    assert selection_shapes({"points": [{"customdata": 3}]}) == []


def _points(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "kernel_id": [f"{i:020x}" for i in range(n)],
            "map_x": rng.random(n, dtype=np.float32),
            "map_y": rng.random(n, dtype=np.float32),
            "cluster_id": np.arange(n) % 3,
            "cluster_label": [f"c<{i % 3}>" for i in range(n)],
            "kernel_name": [f"k<b>{i}</b>" for i in range(n)],
            "task_id": [f"1/{i % 4}" for i in range(n)],
            "op_name": ["softmax"] * n,
            "status": ["correct", "incorrect", "timeout"] * (n // 3) + ["correct"] * (n % 3),
            "speedup_eager": [None if i % 5 == 0 else 0.5 + i / 10 for i in range(n)],
            "speedup_compile": [1.0] * n,
        }
    )


def test_figure_has_a_trace_per_colour_and_the_density_beneath():
    points = _points(30)
    centres = pd.DataFrame({"cluster_id": [0], "label": ["<i>c0</i>"], "x": [0.5], "y": [0.5], "n": [10]})
    counts = np.zeros((4, 4))
    counts[1, 2] = 5
    figure = map_figure(points, "cluster_label", centres, (counts, np.linspace(0, 1, 5), np.linspace(0, 1, 5)))
    kinds = [trace.type for trace in figure.data]
    assert kinds == ["heatmap", "scattergl", "scattergl", "scattergl"]  # the density first: drawn beneath
    shade = np.asarray(figure.data[0].z, dtype=float)
    assert shade[2, 1] > 0 and np.isnan(shade).sum() == 15  # rows are y; empty cells are transparent
    assert sum(len(trace.x) for trace in figure.data[1:]) == 30
    # Archive text is escaped for Plotly's HTML-ish labels: legend names, hover text, annotations.
    assert [trace.name for trace in figure.data[1:]] == ["c&lt;0&gt;", "c&lt;1&gt;", "c&lt;2&gt;"]
    assert "<b>" not in "".join(figure.data[1].text) and "&lt;b&gt;" in figure.data[1].text[0]
    assert figure.layout.annotations[0].text == "&lt;i&gt;c0&lt;/i&gt;"
    assert map_figure(points, "cluster_label", centres).data[0].type == "scattergl"  # no density: not sampled


def test_hover_names_kernel_task_status_and_speedup():
    figure = map_figure(_points(6), "status", pd.DataFrame(columns=["cluster_id", "label", "x", "y", "n"]))
    texts = [text for trace in figure.data for text in trace.text]
    assert "k&lt;b&gt;1&lt;/b&gt;<br>1/1 softmax, incorrect, 0.60x eager" in texts
    assert "k&lt;b&gt;0&lt;/b&gt;<br>1/0 softmax, correct, not timed" in texts


def test_statuses_keep_their_colours_and_speedups_get_a_factor_scale():
    from explorer.components.charts import STATUS_COLOURS

    no_centres = pd.DataFrame(columns=["cluster_id", "label", "x", "y", "n"])
    by_status = map_figure(_points(9), "status", no_centres)
    assert {t.name: t.marker.color for t in by_status.data} == {
        s: STATUS_COLOURS[s] for s in ("correct", "incorrect", "timeout")
    }
    by_speedup = map_figure(_points(30), "speedup_eager", no_centres)
    untimed, timed = by_speedup.data
    assert untimed.name == "not timed" and len(untimed.x) == 6 and len(timed.x) == 24
    assert "1×" in timed.marker.colorbar.ticktext and timed.marker.colorbar.title.text == "Speedup vs eager (×)"


def test_markers_shrink_with_the_count_and_axes_frame_the_kernels():
    assert marker_size(200) > marker_size(10_000) >= 4 and marker_size(50) <= 10
    points = _points(30)
    points["map_x"] = np.linspace(10, 20, 30)
    figure = map_figure(points, "cluster_label", pd.DataFrame(columns=["cluster_id", "label", "x", "y", "n"]))
    low, high = figure.layout.xaxis.range
    assert 9 < low < 10 and 20 < high < 21
    assert figure.data[0].marker.size == marker_size(30)


def test_unclustered_kernels_are_grey_and_last():
    from builder import config
    from explorer.components.charts import OTHER_COLOUR

    points = _points(6)
    points["cluster_label"] = [config.NOISE_CLUSTER_LABEL, "a", "b"] * 2
    figure = map_figure(points, "cluster_label", pd.DataFrame(columns=["cluster_id", "label", "x", "y", "n"]))
    assert [t.name for t in figure.data] == ["a", "b", config.NOISE_CLUSTER_LABEL]
    assert figure.data[-1].marker.color == OTHER_COLOUR and OTHER_COLOUR not in {
        t.marker.color for t in figure.data[:2]
    }
