"""The map page's figure and its selection table (the page itself only wires widgets to these)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from builder import config
from explorer.components.links import kernel_table, quick_links
from explorer.query import Archive

PALETTE = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#3182bd",
]


def map_figure(
    points: pd.DataFrame,
    column: str,
    centres: pd.DataFrame,
    density: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> go.Figure:
    """One WebGL scatter: a trace per colour value (the legend names them), or a colour scale for speedups;
    cluster labels as annotations at their medians; beneath, when given, the density of all kernels in grey."""
    hover = plotly_text(points["kernel_name"])
    # Row numbers (a compact typed array) instead of 100k kernel-id strings; the query layer orders the
    # points by kernel_id, so a selection maps back to the same rows on the rerun it triggers.
    row_numbers = np.arange(len(points), dtype=np.int32)
    figure = go.Figure()
    if density is not None:
        figure.add_trace(density_trace(*density))
    if column == "speedup_eager":
        values = np.log10(points[column].astype(float).clip(lower=1e-3))
        figure.add_trace(
            go.Scattergl(
                x=points["map_x"],
                y=points["map_y"],
                mode="markers",
                customdata=row_numbers,
                text=hover,
                marker=dict(
                    size=4, color=values, colorscale="Viridis", showscale=True, colorbar=dict(title="log10 speedup")
                ),
                hovertemplate="%{text}<extra></extra>",
                name="kernels",
            )
        )
    else:
        if column == "strategy_tags":
            keys = points[column].map(lambda tags: tags[0] if tags is not None and len(tags) else "(none)")
        else:
            keys = points[column].astype(str).fillna("(none)")
        # One figure, one WebGL trace per category value so the legend names them; same palette on every run.
        for i, value in enumerate(sorted(keys.unique())):
            part = keys == value
            figure.add_trace(
                go.Scattergl(
                    x=points.loc[part, "map_x"],
                    y=points.loc[part, "map_y"],
                    mode="markers",
                    customdata=row_numbers[part.to_numpy()],
                    text=hover[part.to_numpy()],
                    name=escape_plotly(str(value)),
                    marker=dict(size=4, color=PALETTE[i % len(PALETTE)]),
                    hovertemplate="%{text}<extra></extra>",
                )
            )
    for row in centres.itertuples(index=False):
        figure.add_annotation(
            x=row.x,
            y=row.y,
            text=escape_plotly(str(row.label)),
            showarrow=False,
            font=dict(size=12, color="black"),
            bgcolor="rgba(255,255,255,0.7)",
        )
    figure.update_layout(
        height=640,
        margin=dict(t=10, b=10, l=10, r=10),
        dragmode="lasso",
        # UMAP coordinates have no units: no ticks, grid or zero lines to read meaning into.
        xaxis=dict(showticklabels=False, showgrid=False, zeroline=False),
        yaxis=dict(showticklabels=False, showgrid=False, zeroline=False),
        legend=dict(itemsizing="constant"),
    )
    return figure


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
    limit = config.EXPLORER_MAP_SELECTION_ROWS
    if shapes:
        count, rows = archive.map_region(shapes, filters, limit)
    else:
        picked = [p.get("customdata") for p in selection.get("points", [])]
        picked = [int(r[0] if isinstance(r, list) else r) for r in picked if r is not None]
        ids = [points["kernel_id"].iloc[r] for r in picked if 0 <= r < len(points)]
        count, rows = len(ids), archive.light_rows(ids[:limit])
    if not count:
        return
    st.subheader(f"Selected kernels ({count:,})")
    if count > len(rows):
        order = "ranking-eligible kernels first, fastest vs eager first" if shapes else "in the order clicked"
        st.caption(f"The first {len(rows):,} listed, {order}.")
    kernel_table(rows, key="map_selection")
    quick_links(rows)


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
