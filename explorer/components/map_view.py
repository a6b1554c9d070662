"""The map page's figure and its selection table (the page itself only wires widgets to these)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from builder import config
from explorer.components.charts import MISSING, OTHER_COLOUR, STATUS_COLOURS
from explorer.components.links import csv_download, kernel_table
from explorer.query import Archive

# Colours for category values, chosen greedily so that each is as far as possible (CIELAB) from every colour
# before it: any two are at least 33 ΔE*76 apart, none is grey (chroma >= 35) nor too light to see on white, so a
# cluster never reads as the grey density beneath nor as the unclustered points. A 25th value reuses the first
# colour with the next marker symbol: (colour, symbol) pairs stay unique.
PALETTE = (
    "#1e78b4",
    "#00e100",
    "#ff0000",
    "#4b00ff",
    "#ff3cb4",
    "#e1c378",
    "#00d2b4",
    "#873c3c",
    "#1e6900",
    "#9669f0",
    "#f0a5d2",
    "#ff9600",
    "#b4d20f",
    "#f00fff",
    "#ff4b69",
    "#785a00",
    "#5ad269",
    "#783c78",
    "#00d2ff",
    "#a52d00",
    "#ff9678",
    "#00694b",
    "#960096",
    "#a5a5ff",
)
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "triangle-down")
# Unclustered kernels and missing values: dark grey crosses, apart from the palette in hue, from the light grey
# density image in lightness and from every cluster in shape.
UNGROUPED_MARKER = {"color": "#404040", "symbol": "x"}
LABEL_CHAR_PX = 7.5  # a 12 px label's average character width, rounded up: label boxes are not underestimated
LABEL_HEIGHT_PX = 18
LABEL_STEP_PX = 22  # a displaced label moves this far per step, above or below its cluster, with a leader line
LABEL_STEPS = 8

SPEEDUP_COLUMNS = {"speedup_eager": "Speedup vs eager (×)", "speedup_compile": "Speedup vs torch.compile (×)"}
SPEEDUP_TICKS = (0.01, 0.1, 0.25, 0.5, 1, 2, 4, 10, 100)


def map_figure(
    points: pd.DataFrame,
    column: str,
    centres: pd.DataFrame,
    density: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> go.Figure:
    """One WebGL scatter: a trace per colour value (the legend names them), or a colour scale for speedups;
    cluster labels as annotations at their medians; beneath, when given, the density of all kernels in grey.
    Hovering a point shows its kernel, task, status and speedup."""
    hover = hover_text(points)
    # Row numbers (a compact typed array) instead of 100k kernel-id strings; the query layer orders the
    # points by kernel_id, so a selection maps back to the same rows on the rerun it triggers.
    row_numbers = np.arange(len(points), dtype=np.int32)
    size = marker_size(len(points))
    figure = go.Figure()
    if density is not None:
        figure.add_trace(density_trace(*density))

    def add_points(part: np.ndarray, name: str, marker: dict) -> None:
        figure.add_trace(
            go.Scattergl(
                x=points["map_x"].to_numpy()[part],
                y=points["map_y"].to_numpy()[part],
                mode="markers",
                customdata=row_numbers[part],
                text=hover[part],
                name=name,
                marker={"size": size, "opacity": 0.85, **marker},
                hovertemplate="%{text}<extra></extra>",
            )
        )

    if column in SPEEDUP_COLUMNS:
        speedups = points[column].astype(float).to_numpy()
        timed = np.isfinite(speedups) & (speedups > 0)
        add_points(~timed, "not timed", dict(color=OTHER_COLOUR))
        add_points(timed, "kernels", speedup_marker(speedups[timed], SPEEDUP_COLUMNS[column]))
    else:
        if column == "strategy_tags":
            keys = points[column].map(lambda tags: tags[0] if tags is not None and len(tags) else MISSING)
        else:
            keys = points[column].astype(str).fillna(MISSING)
        # One figure, one WebGL trace per category value so the legend names them; same palette on every run,
        # and statuses in the colours every other chart gives them.
        # Unclustered and missing values are marked apart, so the palette's colours go to the groups that mean
        # something.
        grey = {MISSING, config.NOISE_CLUSTER_LABEL}
        values = sorted(keys.unique())
        # Ungrouped points are drawn first, beneath every cluster, and listed last in the legend.
        for value in (v for v in values if v in grey):
            marker = dict(color=OTHER_COLOUR) if column == "status" else dict(UNGROUPED_MARKER)
            add_points((keys == value).to_numpy(), escape_plotly(str(value)), {**marker, "opacity": 0.6})
            figure.data[-1].legendrank = 2000  # Plotly's default rank is 1000
        for i, value in enumerate(v for v in values if v not in grey):
            if column == "status":
                marker = dict(color=STATUS_COLOURS.get(value, OTHER_COLOUR))
            else:
                marker = category_marker(i)
            add_points((keys == value).to_numpy(), escape_plotly(str(value)), marker)
    x_range, y_range = data_frame_ranges(points, density)
    for row, offset in zip(centres.itertuples(index=False), label_offsets(centres, x_range, y_range), strict=True):
        figure.add_annotation(
            x=row.x,
            y=row.y,
            text=escape_plotly(str(row.label)),
            showarrow=offset != 0,  # a displaced label keeps a thin line to its cluster's median
            ax=0,
            ay=offset,
            arrowhead=0,
            arrowwidth=1,
            arrowcolor="#404040",
            font=dict(size=12, color="black"),
            bgcolor="rgba(255,255,255,0.8)",
        )
    figure.update_layout(
        height=config.EXPLORER_MAP_HEIGHT_PX + 20,
        margin=dict(t=10, b=10, l=10, r=10),
        dragmode="lasso",
        # UMAP coordinates have no units: no ticks, grid or zero lines to read meaning into. The axes are
        # framed to the kernels (Plotly's own autorange leaves a wide empty margin around WebGL markers).
        xaxis=dict(showticklabels=False, showgrid=False, zeroline=False, range=x_range),
        yaxis=dict(showticklabels=False, showgrid=False, zeroline=False, range=y_range),
        legend=dict(itemsizing="constant"),
        hoverlabel=dict(align="left"),
    )
    return figure


def category_marker(index: int) -> dict:
    return dict(color=PALETTE[index % len(PALETTE)], symbol=SYMBOLS[(index // len(PALETTE)) % len(SYMBOLS)])


def label_boxes(centres: pd.DataFrame, x_range: list[float], y_range: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Each label's centre in pixels of a plot `EXPLORER_MAP_LABEL_WIDTH_PX` wide (a narrow one: on a wider
    screen labels only move apart) and its (width, height) in pixels."""
    width, height = config.EXPLORER_MAP_LABEL_WIDTH_PX, config.EXPLORER_MAP_HEIGHT_PX
    px = (centres["x"].to_numpy(float) - x_range[0]) / (x_range[1] - x_range[0]) * width
    py = (y_range[1] - centres["y"].to_numpy(float)) / (y_range[1] - y_range[0]) * height  # down the screen
    sizes = np.array([[len(str(label)) * LABEL_CHAR_PX + 8, LABEL_HEIGHT_PX] for label in centres["label"]])
    return np.stack([px, py], axis=1).reshape(-1, 2), sizes.reshape(-1, 2)


def label_offsets(centres: pd.DataFrame, x_range: list[float], y_range: list[float]) -> list[int]:
    """Vertical pixel offsets that keep cluster labels from overlapping: the largest clusters are placed first,
    at their medians; a label that would overlap one placed moves up or down in steps until it is clear (or,
    when no step is, to where it overlaps least)."""
    if centres.empty:
        return []
    at, sizes = label_boxes(centres, x_range, y_range)
    order = np.argsort(-centres["n"].to_numpy(), kind="stable") if "n" in centres else np.arange(len(centres))
    steps = [0] + [sign * k * LABEL_STEP_PX for k in range(1, LABEL_STEPS + 1) for sign in (-1, 1)]
    placed: list[tuple[float, float, float, float]] = []
    offsets = [0] * len(centres)
    for i in order:
        (x, y), (w, h) = at[i], sizes[i]

        def overlap(dy: int, x: float = x, y: float = y, w: float = w, h: float = h) -> float:
            return sum(
                max(0.0, min(x + w / 2, bx + bw / 2) - max(x - w / 2, bx - bw / 2))
                * max(0.0, min(y + dy + h / 2, by + bh / 2) - max(y + dy - h / 2, by - bh / 2))
                for bx, by, bw, bh in placed
            )

        best = min(steps, key=lambda dy: (overlap(dy) > 0, overlap(dy), abs(dy)))
        offsets[i] = best
        placed.append((x, y + best, w, h))
    return offsets


def marker_size(n_points: int) -> float:
    """Marker diameter in pixels: large for a few hundred kernels, small enough at 10 000 not to blot the map
    (the area each point gets shrinks with the count; the fourth root keeps small maps readable)."""
    size = config.EXPLORER_MAP_MARKER_SCALE / max(n_points, 1) ** 0.25
    return float(np.clip(size, config.EXPLORER_MAP_MARKER_MIN_PX, config.EXPLORER_MAP_MARKER_MAX_PX))


def data_frame_ranges(
    points: pd.DataFrame, density: tuple[np.ndarray, np.ndarray, np.ndarray] | None
) -> tuple[list[float], list[float]]:
    """Axis ranges around every kernel (the density's edges cover the ones a sample leaves out), padded a little."""
    if density is not None:
        _, x_edges, y_edges = density
        xs, ys = np.array([x_edges[0], x_edges[-1]]), np.array([y_edges[0], y_edges[-1]])
    else:
        xs, ys = points["map_x"].to_numpy(float), points["map_y"].to_numpy(float)
    ranges = []
    for values in (xs, ys):
        low, high = float(np.nanmin(values)), float(np.nanmax(values))
        pad = (high - low) * config.EXPLORER_MAP_PAD_FRACTION or 1.0
        ranges.append([low - pad, high + pad])
    return ranges[0], ranges[1]


def speedup_marker(speedups: np.ndarray, title: str) -> dict:
    """Colour by log10 speedup, with the colour bar's ticks written as plain factors (0.5×, 1×, 2×)."""
    values = np.log10(speedups)
    ticks = [t for t in SPEEDUP_TICKS if len(values) and values.min() - 0.3 <= np.log10(t) <= values.max() + 0.3]
    return dict(
        color=values,
        colorscale="Viridis",
        showscale=True,
        colorbar=dict(title=title, tickvals=np.log10(ticks).tolist(), ticktext=[f"{t:g}×" for t in ticks]),
    )


def hover_text(points: pd.DataFrame) -> np.ndarray:
    """Kernel, then task, status and speedup, archive text escaped. Kept short: at 100 000 points every character
    is 100 kB more for the browser to fetch and parse, and the JSON escapes non-ASCII and `<` (`·` is 6 bytes, a
    line break, `<br>` in Plotly, 14): one break, ASCII separators."""
    speedup = points["speedup_eager"].map(lambda v: f"{v:.2f}x eager" if pd.notna(v) else "not timed")
    task = points["task_id"].astype(str) + " " + points["op_name"].fillna("").astype(str)
    text = (
        plotly_text(points["kernel_name"]).astype(object)
        + "<br>"
        + plotly_text(task).astype(object)
        + ", "
        + plotly_text(points["status"]).astype(object)
        + ", "
        + speedup.to_numpy(dtype=object)
    )
    return np.asarray(text, dtype=object)


def density_trace(counts: np.ndarray, x_edges: np.ndarray, y_edges: np.ndarray) -> go.Heatmap:
    """Grey shading where kernels are (log scale, empty cells transparent): one image, cheap to draw."""
    shade = np.log1p(counts.T)  # Heatmap rows are y
    shade[counts.T == 0] = np.nan
    return go.Heatmap(
        z=shade,
        x=(x_edges[:-1] + x_edges[1:]) / 2,
        y=(y_edges[:-1] + y_edges[1:]) / 2,
        colorscale=[[0.0, "#e8e8e8"], [1.0, "#8a8a8a"]],
        showscale=False,
        hoverinfo="skip",
        name="all kernels (density)",
    )


def selection_table(archive: Archive, filters, points: pd.DataFrame, event) -> None:
    """Box/lasso: every kernel inside the shapes, from the whole (filtered) archive; click: the clicked points."""
    selection = event.selection if event else None
    if not selection:
        return
    shapes = selection_shapes(selection)
    if shapes:
        count, rows = archive.map_region(shapes, filters, limit=None)
    else:
        picked = [p.get("customdata") for p in selection.get("points", [])]
        picked = [int(r[0] if isinstance(r, list) else r) for r in picked if r is not None]
        ids = [points["kernel_id"].iloc[r] for r in picked if 0 <= r < len(points)]
        count, rows = len(ids), archive.light_rows(ids)
    if not count:
        return
    st.subheader(f"Selected kernels ({count:,})")
    order = "ranking-eligible kernels first, fastest vs eager first" if shapes else "in the order clicked"
    st.caption(f"Every kernel inside the selection, {order}.")
    kernel_table(rows, key="map_selection")
    csv_download(rows, "map_selection.csv", key="map_selection_csv")


def selection_shapes(selection: dict) -> list[tuple[list[float], list[float]]]:
    """Polygons (xs, ys) of a Plotly selection as Streamlit reports it: a box as its x and y ranges, a lasso as
    its vertices. A shape missing its coordinates is skipped."""
    shapes = []
    for box in selection.get("box", []):
        xs, ys = box.get("x", []), box.get("y", [])
        if len(xs) == 2 and len(ys) == 2:
            shapes.append(([xs[0], xs[1], xs[1], xs[0]], [ys[0], ys[0], ys[1], ys[1]]))
    for lasso in selection.get("lasso", []):
        xs, ys = lasso.get("x", []), lasso.get("y", [])
        if len(xs) >= 3 and len(xs) == len(ys):
            shapes.append((list(xs), list(ys)))
    return shapes


def plotly_text(values: pd.Series) -> np.ndarray:
    """Archive text for Plotly hover/annotation text, which understands a subset of HTML tags: escape it."""
    return values.astype(str).str.replace("&", "&amp;").str.replace("<", "&lt;").str.replace(">", "&gt;").to_numpy()


def escape_plotly(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
