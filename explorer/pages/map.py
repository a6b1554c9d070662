"""/map : the 2-D embedding map (Plotly WebGL), coloured by a chosen column; selections list kernels."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from builder import config
from explorer.components.charts import escape_plotly, plotly_text
from explorer.components.context import current_archive, page_errors
from explorer.components.filter_bar import filter_sidebar, url_choice
from explorer.components.links import kernel_table, quick_links

COLOURS = {
    "cluster": "cluster_label",
    "op category": "op_category",
    "level": "level",
    "model": "model",
    "status": "status",
    "speedup": "speedup_eager",
    "strategy tag": "strategy_tags",
}
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

with page_errors():
    archive = current_archive()
    st.title("Map of the archive")
    filters = filter_sidebar(archive, "map")
    colour_name = url_choice("colour", list(COLOURS), "cluster", "Colour by", "map")
    column = COLOURS[colour_name]
    points = archive.map_points(column, filters)
    if points.empty:
        st.info("No kernel has map coordinates under these filters (run `kernel-archive embed` on the dataset).")
        st.stop()

    hover = plotly_text(points["kernel_name"])
    # Row numbers (a compact typed array) instead of 100k kernel-id strings; the query layer orders the
    # points by kernel_id, so a selection maps back to the same rows on the rerun it triggers.
    row_numbers = np.arange(len(points), dtype=np.int32)
    figure = go.Figure()
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
    for row in archive.cluster_centres().itertuples(index=False):
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
        xaxis=dict(showticklabels=False),
        yaxis=dict(showticklabels=False),
        legend=dict(itemsizing="constant"),
    )
    event = st.plotly_chart(figure, key="map_chart", on_select="rerun", selection_mode=("points", "box", "lasso"))
    st.caption(f"{len(points):,} kernels. Click, box- or lasso-select points to list them.")

    selected = []
    if event and event.selection and event.selection.points:
        rows = [p.get("customdata") for p in event.selection.points]
        rows = [int(r[0] if isinstance(r, list) else r) for r in rows if r is not None]
        selected = [points["kernel_id"].iloc[r] for r in rows if 0 <= r < len(points)]
    if selected:
        rows = archive.light_rows(selected[: config.EXPLORER_MAP_SELECTION_ROWS])
        st.subheader(f"Selected kernels ({len(selected)})")
        kernel_table(rows, key="map_selection")
        quick_links(rows)
