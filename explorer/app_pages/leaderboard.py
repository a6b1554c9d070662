"""/leaderboard : best eligible kernel per task and per-model aggregates, filtered and sorted via the URL."""

from __future__ import annotations

import streamlit as st

from explorer.components.context import current_archive, page_errors
from explorer.components.filter_bar import filter_sidebar, url_choice
from explorer.components.links import csv_download, kernel_table

SORTS = {
    "speedup_eager": "Speedup vs eager",
    "speedup_compile": "Speedup vs torch.compile",
    "runtime_ms": "Runtime",
    "speed_of_light": "Speed of light",
    "task_id": "Task",
    "model": "Model",
    "kernel_name": "Kernel name",
}
ORDERS = {"desc": "Descending", "asc": "Ascending"}
BASELINE_WORDS = {"eager": "PyTorch eager", "compile": "torch.compile"}

with page_errors():
    archive = current_archive()
    st.title("Leaderboard")
    filters = filter_sidebar(archive, "leaderboard")
    sorts = {k: v for k, v in SORTS.items() if k != "speed_of_light" or archive.has_values("speed_of_light")}
    sort = url_choice("sort", list(sorts), "speedup_eager", "Sort by", "leaderboard", labels=sorts)
    order = url_choice("order", list(ORDERS), "desc", "Order", "leaderboard", labels=ORDERS)
    baseline = url_choice(
        "baseline", list(BASELINE_WORDS), "eager", "Best kernel by speedup vs", "leaderboard", labels=BASELINE_WORDS
    )

    best = archive.best_per_task(filters, sort=sort, descending=order == "desc", baseline=baseline)
    st.subheader(f"Best ranking-eligible kernel per task ({len(best)} tasks)")
    st.caption(
        "Ranking-eligible: verified correct and without any verifier flag. "
        f"{archive.count(filters):,} kernels match the filters. A kernel's name opens its page."
    )
    kernel_table(best, key="best_table", noun="tasks")
    csv_download(best, "leaderboard_best_per_task.csv", key="best_csv")

    per_model = archive.by_model(filters)
    if per_model[["model", "experiment"]].isna().all().all():
        st.stop()  # no model or experiment recorded (bundled or imported kernels): one row of blanks says nothing
    st.subheader("Per model and experiment")
    st.caption(
        "Fast₁: share of attempted tasks whose best eligible kernel beats eager; "
        "geomean: of the best eligible speedup per task."
    )
    st.dataframe(
        per_model,
        hide_index=True,
        key="model_table",
        column_order=[c for c in per_model.columns if per_model[c].notna().any()],
        column_config={
            "model": "Model",
            "experiment": "Experiment",
            "kernels": "Kernels",
            "tasks": "Tasks",
            "correct_rate": st.column_config.NumberColumn("Correct (share)", format="%.3f"),
            "eligible_rate": st.column_config.NumberColumn("Eligible (share)", format="%.3f"),
            "fast_1": st.column_config.NumberColumn("Fast₁ (share)", format="%.3f"),
            "geomean_speedup": st.column_config.NumberColumn("Geomean speedup vs eager (×)", format="%.3f"),
        },
    )
    csv_download(per_model, "leaderboard_per_model.csv", key="model_csv")
