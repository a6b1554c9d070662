"""/leaderboard : best eligible kernel per task and per-model aggregates, filtered and sorted via the URL."""

from __future__ import annotations

import streamlit as st

from explorer.components.context import current_archive, page_errors
from explorer.components.filter_bar import filter_sidebar, url_choice
from explorer.components.links import csv_download, kernel_table, quick_links

SORTS = ["speedup_eager", "speedup_compile", "runtime_ms", "task_id", "model", "kernel_name"]

with page_errors():
    archive = current_archive()
    st.title("Leaderboard")
    filters = filter_sidebar(archive, "leaderboard")
    sort = url_choice("sort", SORTS, "speedup_eager", "Sort by", "leaderboard")
    order = url_choice("order", ["desc", "asc"], "desc", "Order", "leaderboard")
    baseline = url_choice("baseline", ["eager", "compile"], "eager", "Best kernel by speedup vs", "leaderboard")

    best = archive.best_per_task(filters, sort=sort, descending=order == "desc", baseline=baseline)
    st.subheader(f"Best ranking-eligible kernel per task ({len(best)} tasks)")
    st.caption(
        "Ranking-eligible: verified correct and without any verifier flag. "
        f"{archive.count(filters):,} kernels match the filters."
    )
    kernel_table(best, key="best_table")
    csv_download(best, "leaderboard_best_per_task.csv", key="best_csv")
    quick_links(best)

    st.subheader("Per model and experiment")
    st.caption(
        "fast_1: share of attempted tasks whose best eligible kernel beats eager; "
        "geomean: of the best eligible speedup per task."
    )
    per_model = archive.by_model(filters)
    st.dataframe(
        per_model,
        hide_index=True,
        key="model_table",
        column_config={
            c: st.column_config.NumberColumn(c, format="%.3f")
            for c in ("correct_rate", "eligible_rate", "fast_1", "geomean_speedup")
        },
    )
    csv_download(per_model, "leaderboard_per_model.csv", key="model_csv")
