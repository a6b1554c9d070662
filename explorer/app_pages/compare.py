"""/compare?a=ID&b=ID : two kernels side by side with a unified diff and their metrics."""

from __future__ import annotations

import difflib

import pandas as pd
import streamlit as st

from explorer.components.context import current_archive, page_errors
from explorer.components.links import kernel_link, plain
from explorer.components.profiles import PROFILE_NUMBERS

METRICS = (
    "task_id",
    "status",
    "flags",
    "ranking_eligible",
    "runtime_ms",
    "eager_ms",
    "compile_ms",
    "speedup_eager",
    "speedup_compile",
    "max_diff",
    *PROFILE_NUMBERS,
    "model",
    "experiment",
    "round",
    "strategy_tags",
    "cluster_label",
)

with page_errors():
    archive = current_archive()
    st.title("Compare kernels")
    ids = {side: st.query_params.get(side, "") for side in ("a", "b")}
    cols = st.columns(2)
    for column, side in zip(cols, ("a", "b"), strict=True):
        entered = column.text_input(f"Kernel {side.upper()} id", value=ids[side], key=f"compare_{side}_{ids[side]}")
        if entered != ids[side]:
            st.query_params[side] = entered
            ids[side] = entered
    if not ids["a"] or not ids["b"]:
        st.info("Give two kernel ids (or open /compare?a=ID&b=ID, e.g. from a kernel page).")
        st.stop()

    records = {side: archive.kernel(kid) for side, kid in ids.items()}
    missing = [f"{side.upper()} ({ids[side]})" for side, rec in records.items() if rec is None]
    if missing:
        st.error(plain(f"No such kernel in this archive: {', '.join(missing)}"))
        st.stop()
    a, b = records["a"], records["b"]

    st.dataframe(
        pd.DataFrame({"metric": METRICS, "A": [str(a.get(m)) for m in METRICS], "B": [str(b.get(m)) for m in METRICS]}),
        hide_index=True,
        key="compare_metrics",
    )
    if a.get("speedup_eager") and b.get("speedup_eager"):
        st.caption(f"B is {b['speedup_eager'] / a['speedup_eager']:.2f}x the eager speedup of A.")

    left, right = st.columns(2)
    for column, side, rec in ((left, "A", a), (right, "B", b)):
        with column:
            st.markdown(f"**{side}**")
            kernel_link(rec["kernel_id"], rec["kernel_name"])
            st.code(rec["cuda_code"], language="cpp", line_numbers=True)

    st.subheader("Unified diff (A → B)")
    diff = "".join(
        difflib.unified_diff(
            a["cuda_code"].splitlines(keepends=True),
            b["cuda_code"].splitlines(keepends=True),
            fromfile=f"a/{a['kernel_name']}",
            tofile=f"b/{b['kernel_name']}",
        )
    )
    st.code(diff or "(identical sources)", language="diff")
