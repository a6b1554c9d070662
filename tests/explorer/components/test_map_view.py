"""The map's figure and the shapes read from a Plotly selection event."""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.components.map_view import map_figure, selection_shapes


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
        }
    )


def test_figure_is_one_webgl_scatter_over_the_density_with_a_legend_per_colour():
    points = _points(30)
    centres = pd.DataFrame({"cluster_id": [0], "label": ["<i>c0</i>"], "x": [0.5], "y": [0.5], "n": [10]})
    counts = np.zeros((4, 4))
    counts[1, 2] = 5
    figure = map_figure(points, "cluster_label", centres, (counts, np.linspace(0, 1, 5), np.linspace(0, 1, 5)))
    kinds = [trace.type for trace in figure.data]
    # The density first (drawn beneath), then one WebGL trace of every point, then legend entries without points.
    assert kinds == ["heatmap", "scattergl", "scatter", "scatter", "scatter"]
    shade = np.asarray(figure.data[0].z, dtype=float)
    assert shade[2, 1] > 0 and np.isnan(shade).sum() == 15  # rows are y; empty cells are transparent
    scatter, legend = figure.data[1], figure.data[2:]
    assert len(scatter.x) == 30 and list(scatter.customdata) == list(range(30))  # rows, as selections report them
    assert all(trace.x == (None,) and trace.showlegend is not False for trace in legend)
    assert figure.layout.showlegend is True and figure.layout.legend.itemclick is False
    # Archive text is escaped for Plotly's HTML-ish labels: legend names, hover text, annotations.
    assert [trace.name for trace in legend] == ["c&lt;0&gt;", "c&lt;1&gt;", "c&lt;2&gt;"]
    assert "<b>" not in "".join(scatter.text) and "&lt;b&gt;" in scatter.text[0]
    assert figure.layout.annotations[0].text == "&lt;i&gt;c0&lt;/i&gt;"
    # Each point is drawn in its category's legend colour: its value falls in that colour's step of the scale.
    colour_of = {trace.name: trace.marker.color for trace in legend}
    assert len(set(colour_of.values())) == 3
    steps = scatter.marker.colorscale
    for value, label in zip(scatter.marker.color, points["cluster_label"], strict=True):
        position = value / scatter.marker.cmax
        drawn = [start[1] for start, end in zip(steps[::2], steps[1::2], strict=True) if start[0] <= position < end[0]]
        assert drawn == [colour_of[label.replace("<", "&lt;").replace(">", "&gt;")]]
    assert map_figure(points, "cluster_label", centres).data[0].type == "scattergl"  # no density: not sampled


def test_speedup_colouring_is_a_colour_scale_without_legend_entries():
    points = _points(10).assign(speedup_eager=np.linspace(0.5, 8, 10))
    figure = map_figure(points, "speedup_eager", pd.DataFrame(columns=["cluster_id", "label", "x", "y", "n"]))
    assert [trace.type for trace in figure.data] == ["scattergl"]
    assert figure.data[0].marker.showscale is True and figure.layout.showlegend is False
    assert np.allclose(figure.data[0].marker.color, np.log10(points["speedup_eager"]))
