"""The map's figure and the shapes read from a Plotly selection event."""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.components.map_view import (
    PALETTE,
    category_marker,
    label_boxes,
    label_offsets,
    map_figure,
    marker_size,
    selection_shapes,
)


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


def test_unclustered_kernels_are_apart_beneath_and_listed_last():
    from builder import config
    from explorer.components.map_view import UNGROUPED_MARKER

    points = _points(6)
    points["cluster_label"] = [config.NOISE_CLUSTER_LABEL, "a", "b"] * 2
    figure = map_figure(points, "cluster_label", pd.DataFrame(columns=["cluster_id", "label", "x", "y", "n"]))
    # drawn first (beneath the clusters), ranked last in the legend
    assert [t.name for t in figure.data] == [config.NOISE_CLUSTER_LABEL, "a", "b"]
    assert figure.data[0].legendrank > max(t.legendrank or 1000 for t in figure.data[1:])
    noise = figure.data[0].marker
    assert (noise.color, noise.symbol) == (UNGROUPED_MARKER["color"], UNGROUPED_MARKER["symbol"])
    assert {t.marker.symbol for t in figure.data[1:]} == {"circle"} and noise.color not in PALETTE


def _lab(hex_colour: str) -> np.ndarray:
    rgb = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)]) / 255
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = linear @ np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]).T
    f = np.cbrt(xyz / np.array([0.95047, 1.0, 1.08883]))  # every palette colour is well above the linear toe
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_palette_colours_are_distinguishable_and_none_is_grey():
    labs = np.array([_lab(c) for c in PALETTE])
    distances = np.linalg.norm(labs[:, None] - labs[None], axis=2) + np.eye(len(labs)) * 1e9
    assert distances.min() > 30  # ΔE*76: clearly different colours, not shades of one
    assert np.hypot(labs[:, 1], labs[:, 2]).min() > 30  # no grey: the density image and unclustered are grey
    assert labs[:, 0].max() < 85  # none vanishes on the white background
    assert len(PALETTE) >= 20


def test_the_25th_category_differs_from_the_first_in_shape():
    markers = [category_marker(i) for i in range(60)]
    assert len({(m["color"], m["symbol"]) for m in markers}) == 60


def test_cluster_labels_do_not_overlap_even_when_their_medians_do():
    # Eight clusters whose medians sit almost on one point, and two far away.
    centres = pd.DataFrame(
        {
            "cluster_id": range(10),
            "label": [f"row reductions · warp shuffle {i}" for i in range(10)],
            "x": [0.0 + 0.001 * i for i in range(8)] + [5.0, -5.0],
            "y": [0.0] * 8 + [5.0, -5.0],
            "n": list(range(10, 0, -1)),
        }
    )
    x_range, y_range = [-6.0, 6.0], [-6.0, 6.0]
    offsets = label_offsets(centres, x_range, y_range)
    at, sizes = label_boxes(centres, x_range, y_range)
    boxes = [(x, y + dy, w, h) for (x, y), (w, h), dy in zip(at, sizes, offsets, strict=True)]
    for i, (x, y, w, h) in enumerate(boxes):
        for bx, by, bw, bh in boxes[i + 1 :]:
            assert abs(x - bx) >= (w + bw) / 2 or abs(y - by) >= (h + bh) / 2, (i, boxes)
    assert offsets[0] == 0 and offsets[8] == 0 and offsets[9] == 0  # the largest and the lone ones stay put
    figure = map_figure(_points(6), "status", centres)  # the figure places its labels the same way
    drawn = label_offsets(centres, list(figure.layout.xaxis.range), list(figure.layout.yaxis.range))
    assert [a.ay for a in figure.layout.annotations] == drawn and any(drawn)
    assert [a.showarrow for a in figure.layout.annotations] == [dy != 0 for dy in drawn]
