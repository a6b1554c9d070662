"""/ : counts, correct rate, speedup distributions, fast_p curves and top kernels."""

from __future__ import annotations

import numpy as np
import streamlit as st

from explorer.components.charts import bar_counts, fast_p_chart, log_histogram, show
from explorer.components.context import current_archive, page_errors
from explorer.components.links import markdown_kernel_table, plain

with page_errors():
    archive = current_archive()
    st.title("Verified kernel archive")
    overview = archive.overview()
    totals = overview.totals
    several_models = totals["models"] > 1  # a count of 0 or 1 and a one-bar chart say nothing
    cols = st.columns(5 if several_models else 4)
    cols[0].metric("Kernels", f"{totals['kernels']:,}")
    cols[1].metric("Tasks", f"{totals['tasks']:,}")
    cols[2].metric("Correct", f"{totals['correct_rate']:.1%}")
    cols[3].metric("Ranking-eligible", f"{totals['eligible_rate']:.1%}", help="correct and without any verifier flag")
    if several_models:
        cols[4].metric("Models", totals["models"])
    elif totals["models"] == 1:
        st.caption(plain(f"Every kernel comes from one model: {overview.counts_by_model['model'].dropna().iloc[0]}."))

    left, right = st.columns(2)
    with left:
        show(
            bar_counts(overview.counts_by_level, "level", "status", "Kernels by level and status"),
            "counts_level",
        )
    with right:
        if several_models:
            chart = bar_counts(overview.counts_by_model, "model", "status", "Kernels by model and status")
        else:
            chart = bar_counts(
                overview.counts_by_category, "op_category", "status", "Kernels by op category and status"
            )
        show(chart, "counts_model")

    st.subheader("Speedups of ranking-eligible kernels")
    left, right = st.columns(2)
    for column, baseline, title in ((left, "eager", "vs PyTorch eager"), (right, "compile", "vs torch.compile")):
        with column:
            values = overview.speedups[baseline]
            if values.size:
                geomean = np.exp(np.log(values).mean())
                show(log_histogram(values, f"Speedup {title} (geomean {geomean:.2f}x)"), f"hist_{baseline}")
            else:
                st.info(f"No timed kernels {title}.")

    st.subheader("fast_p: share of tasks with a correct kernel faster than p x baseline")
    baselines = (("eager", "vs eager"), ("compile", "vs torch.compile"))
    show(fast_p_chart({name: overview.fast_p[b] for b, name in baselines}), "fast_p")

    st.subheader("Top kernels")
    top = overview.top
    markdown_kernel_table(top)
