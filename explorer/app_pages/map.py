"""/map : the 2-D embedding map (Plotly WebGL), coloured by a chosen column; selections list kernels."""

from __future__ import annotations

import streamlit as st

from builder import config
from explorer.components.context import current_archive, page_errors
from explorer.components.filter_bar import filter_sidebar, url_choice
from explorer.components.map_view import map_figure, selection_table

# Plotly draws WebGL at twice the canvas size by default (its export ratio): four times the pixels to fill,
# which software WebGL (SwiftShader, VMs, remote desktops) pays on every draw. The map draws at screen size.
MAP_CONFIG = {"plotGlPixelRatio": 1}

COLOURS = {
    "cluster": "cluster_label",
    "op category": "op_category",
    "level": "level",
    "model": "model",
    "status": "status",
    "speedup": "speedup_eager",
    "speedup vs torch.compile": "speedup_compile",
    "strategy tag": "strategy_tags",
}

with page_errors():
    archive = current_archive()
    st.title("Map of the archive")
    filters = filter_sidebar(archive, "map")
    colour_name = url_choice("colour", list(COLOURS), "cluster", "Colour by", "map")
    drawn = url_choice("points", ["sample", "all"], "sample", "Points drawn", "map")
    column = COLOURS[colour_name]
    total = archive.map_total(filters)
    points = archive.map_points(column, filters, None if drawn == "all" else config.EXPLORER_MAP_MAX_POINTS)
    if points.empty:
        st.info("No kernel has map coordinates under these filters (run `kernel-archive embed` on the dataset).")
        st.stop()

    sampled = len(points) < total
    density = archive.map_density(filters) if sampled else None
    figure = map_figure(points, column, archive.cluster_centres(), density)
    event = st.plotly_chart(
        figure, key="map_chart", on_select="rerun", selection_mode=("points", "box", "lasso"), config=MAP_CONFIG
    )
    if sampled:
        st.caption(
            f"{len(points):,} of {total:,} kernels drawn: a fixed sample keeping every colour's share, over a grey "
            "density of all of them (choose *all* under Points drawn to draw every kernel; slower). Box and lasso "
            "selections list every kernel inside the shape, drawn or not; a click lists the clicked point."
        )
    else:
        st.caption(f"{total:,} kernels. Click, box- or lasso-select points to list them.")
    selection_table(archive, filters, points, event)
