"""/task?id=LEVEL/NUMBER : reference code, every kernel of the task, verdict breakdown."""

from __future__ import annotations

import streamlit as st

from explorer.components.charts import bar_counts, runtime_speedup_scatter, show
from explorer.components.context import current_archive, page_errors
from explorer.components.links import csv_download, kernel_table, plain
from explorer.filters import Filters

with page_errors():
    archive = current_archive()
    task_id = st.query_params.get("id")
    names = archive.task_names()  # numeric order
    if not task_id:
        st.title("Task")
        st.info("Pick a task (or open /task?id=LEVEL/NUMBER).")
        choice = st.selectbox(
            "Task", list(names), index=None, key="task_pick", format_func=lambda t: f"{t} · {names[t] or '?'}"
        )
        if choice:
            st.query_params["id"] = choice
            st.rerun()
        st.stop()
    task = archive.task(task_id)
    if task is None:
        st.error(plain(f"No task {task_id!r} in this archive."))
        st.stop()

    st.title(plain(f"Task {task['task_id']} · {task['op_name']}"))
    st.caption(
        plain(f"level {task['level']} · category {task['op_category'] or 'unknown'} · {task['kernels']:,} kernels")
    )
    kernels = archive.task_kernels(task_id)

    left, right = st.columns(2)
    with left:
        verdicts = archive.counts_by("task_id", "status", filters=Filters(task=(task_id,)))
        show(bar_counts(verdicts, "status", "status", "Verdicts"), "task_verdicts")
    with right:
        scatter = runtime_speedup_scatter(kernels, "Runtime vs speedup (timed kernels)")
        if scatter.data.empty:
            st.info("No timed kernel in this task yet (only correct kernels are timed).")
        else:
            show(scatter, "task_scatter")

    st.subheader("Kernels")
    kernel_table(kernels, key="task_kernels")
    csv_download(kernels, f"task_{task_id.replace('/', '_')}_kernels.csv", key="task_csv")

    st.subheader("Reference")
    st.code(task["reference_module_code"] or "(not recorded)", language="python", line_numbers=True)
    if task["reference_functional_code"]:
        with st.expander("Functional form"):
            st.code(task["reference_functional_code"], language="python", line_numbers=True)
