"""/ : counts, correct rate, speedup distributions, fast_p curves and top kernels."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from explorer.components.charts import bar_counts, log_histogram
from explorer.components.context import current_archive, page_errors
from explorer.components.links import kernel_table, quick_links

with page_errors():
    archive = current_archive()
    st.title("Verified kernel archive")
    totals = archive.totals()
    cols = st.columns(5)
    cols[0].metric("Kernels", f"{totals['kernels']:,}")
    cols[1].metric("Tasks", f"{totals['tasks']:,}")
    cols[2].metric("Correct", f"{totals['correct_rate']:.1%}")
    cols[3].metric("Ranking-eligible", f"{totals['eligible_rate']:.1%}", help="correct and without any verifier flag")
    cols[4].metric("Models", totals["models"])

    left, right = st.columns(2)
    with left:
        st.plotly_chart(
            bar_counts(archive.counts_by("level", "status"), "level", "status", "Kernels by level and status"),
            key="counts_level",
        )
    with right:
        st.plotly_chart(
            bar_counts(archive.counts_by("model", "status"), "model", "status", "Kernels by model and status"),
            key="counts_model",
        )

    st.subheader("Speedups of ranking-eligible kernels")
    left, right = st.columns(2)
    for column, baseline, title in ((left, "eager", "vs PyTorch eager"), (right, "compile", "vs torch.compile")):
        with column:
            values = archive.speedup_values(baseline)
            if values.size:
                st.plotly_chart(
                    log_histogram(values, f"Speedup {title} (geomean {np.exp(np.log(values).mean()):.2f}x)"),
                    key=f"hist_{baseline}",
                )
            else:
                st.info(f"No timed kernels {title}.")

    st.subheader("fast_p: share of tasks with a correct kernel faster than p x baseline")
    figure = go.Figure()
    for baseline, name in (("eager", "vs eager"), ("compile", "vs torch.compile")):
        curve = archive.fast_p_curve(baseline)
        figure.add_trace(go.Scatter(x=curve["p"], y=curve["fast_p"], mode="lines", name=name))
    figure.update_layout(
        xaxis_title="p (speedup threshold)",
        yaxis_title="share of tasks",
        yaxis_tickformat=".0%",
        height=340,
        margin=dict(t=20, b=40),
    )
    st.plotly_chart(figure, key="fast_p")

    st.subheader("Top kernels")
    top = archive.top_kernels(20)
    kernel_table(top, key="top_table")
    quick_links(top)
