"""/task?id=LEVEL/NUMBER : reference code, every kernel of the task, verdict breakdown."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from explorer.components.charts import STATUS_COLOURS, bar_counts, plotly_text
from explorer.components.context import current_archive, page_errors
from explorer.components.links import csv_download, kernel_table, quick_links
from explorer.filters import Filters

with page_errors():
    archive = current_archive()
    task_id = st.query_params.get("id")
    tasks = archive.options("task_id")
    if not task_id:
        st.title("Task")
        st.info("Pick a task (or open /task?id=LEVEL/NUMBER).")
        choice = st.selectbox("Task", tasks, index=None, key="task_pick")
        if choice:
            st.query_params["id"] = choice
            st.rerun()
        st.stop()
    task = archive.task(task_id)
    if task is None:
        st.error(f"No task {task_id!r} in this archive.")
        st.stop()

    st.title(f"Task {task['task_id']}: {task['op_name']}")
    st.caption(f"level {task['level']} · category {task['op_category'] or 'unknown'} · {task['kernels']} kernels")
    kernels = archive.task_kernels(task_id)

    left, right = st.columns(2)
    with left:
        st.plotly_chart(
            bar_counts(
                archive.counts_by("task_id", "status", filters=Filters(task=(task_id,))),
                "task_id",
                "status",
                "Verdicts",
            ),
            key="task_verdicts",
        )
    with right:
        timed = kernels.dropna(subset=["runtime_ms", "speedup_eager"])
        figure = go.Figure()
        for status, part in timed.groupby("status"):
            figure.add_trace(
                go.Scattergl(
                    x=part["runtime_ms"],
                    y=part["speedup_eager"],
                    mode="markers",
                    name=status,
                    text=plotly_text(part["kernel_name"]),
                    marker_color=STATUS_COLOURS.get(status),
                    hovertemplate="%{text}<br>%{x:.4f} ms · %{y:.2f}x<extra></extra>",
                )
            )
        figure.update_layout(
            title="Runtime vs speedup (timed kernels)",
            xaxis_title="runtime (ms)",
            xaxis_type="log",
            yaxis_title="speedup vs eager",
            yaxis_type="log",
            height=340,
            margin=dict(t=40, b=40),
        )
        st.plotly_chart(figure, key="task_scatter")

    st.subheader("Kernels")
    kernel_table(kernels, key="task_kernels")
    csv_download(kernels, f"task_{task_id.replace('/', '_')}_kernels.csv", key="task_csv")
    quick_links(kernels)

    st.subheader("Reference")
    st.code(task["reference_module_code"] or "(not recorded)", language="python", line_numbers=True)
    if task["reference_functional_code"]:
        with st.expander("Functional form"):
            st.code(task["reference_functional_code"], language="python", line_numbers=True)
