"""/kernel?id=KERNEL_ID : code, verdict and flags, timings, profiles, neighbours, lineage, downloads."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from explorer.components.context import current_archive, page_errors
from explorer.components.downloads import reverify_script, source_filename
from explorer.components.kernel_header import identity, measurement_context, timing_metrics
from explorer.components.links import compare_link, kernel_link, kernel_table, plain, task_link
from explorer.components.profiles import PROFILE_NUMBERS, clang_tidy_diagnostics, profile_section
from explorer.kernel_facts import first_error_line, shorten_paths
from explorer.query_base import HEAVY_COLUMNS
from schemas import disqualifying_flags, flag_vocabulary

LANGUAGES = {"cuda": "cpp", "cpp": "cpp", "python": "python"}  # st.code has no CUDA lexer; C++ is the closest

with page_errors():
    archive = current_archive()
    kernel_id = st.query_params.get("id")
    if not kernel_id:
        st.title("Kernel")
        st.info("Open a kernel from the leaderboard, a task, the map or search (or /kernel?id=KERNEL_ID).")
        st.stop()
    record = archive.kernel(kernel_id)
    if record is None:
        st.error(plain(f"No kernel {kernel_id!r} in this archive."))
        st.stop()

    st.title(plain(record["kernel_name"]))
    st.caption(plain(" · ".join(identity(record))))
    task_link(record["task_id"], f"Task {record['task_id']} · {record['op_name']}")

    status = record["status"]
    verdict = f"Verdict: {status}" + (
        " · ranking-eligible" if record["ranking_eligible"] else " · not ranking-eligible"
    )
    (st.success if record["ranking_eligible"] else st.warning if status == "correct" else st.error)(plain(verdict))
    headline = first_error_line(record.get("error")) if status != "correct" else None
    if headline:
        # The compiler's own words first: the full text (a build command, paths) is in the Error tab.
        st.error(plain(headline), icon=":material/error:")
    vocabulary = flag_vocabulary()
    flags = record.get("flags") or []
    if flags:
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "flag": flag,
                        "disqualifying": flag in disqualifying_flags(),
                        "meaning": vocabulary.get(flag, {}).get("text", "(not in this builder's flag vocabulary)"),
                    }
                    for flag in flags
                ]
            ),
            hide_index=True,
            key="flags_table",
        )

    timing_metrics(record)
    st.caption(plain(" · ".join(measurement_context(record))))

    code_tab, profile_tab, tidy_tab, error_tab, related_tab, details_tab = st.tabs(
        ["Code", "Profiles", "clang-tidy", "Error", "Neighbours & lineage", "Details"]
    )
    with code_tab:
        st.code(record["cuda_code"], language=LANGUAGES.get(record["language"], "cpp"), line_numbers=True)
        left, right = st.columns(2)
        left.download_button(
            f"Download {plain(source_filename(record))}",
            record["cuda_code"].encode(),
            file_name=source_filename(record),
            key="download_source",
            icon=":material/download:",
        )
        right.download_button(
            "Download re-verify script",
            reverify_script(record).encode(),
            file_name=f"reverify_{record['kernel_id']}.sh",
            key="download_script",
            icon=":material/verified:",
        )
        with st.expander("Reference (PyTorch module)"):
            st.code(record.get("reference_module_code") or "(not recorded)", language="python", line_numbers=True)
    with profile_tab:
        # clang-tidy's count stays with its diagnostics in their own tab
        ncu_cols = {k: record.get(k) for k in PROFILE_NUMBERS if not k.startswith("clang_tidy")}
        if any(v is not None for v in ncu_cols.values()):
            st.dataframe(pd.DataFrame([ncu_cols]), hide_index=True, key="ncu_summary")
        profile_section("Nsight Compute", record.get("ncu_profile"), key="ncu")
        profile_section("torch profiler", record.get("torch_profile"), key="torch")
    with tidy_tab:
        diagnostics = clang_tidy_diagnostics(record.get("clang_tidy"))
        if diagnostics is None:
            profile_section("clang-tidy", record.get("clang_tidy"), key="tidy")
        elif diagnostics.empty:
            st.success("clang-tidy: no diagnostics.")
        else:
            st.dataframe(diagnostics, hide_index=True, key="tidy_table")
    with error_tab:
        if record.get("error"):
            st.code(shorten_paths(record["error"]), language=None, wrap_lines=True)
        else:
            st.caption("No error recorded.")
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        k: record.get(k)
                        for k in (
                            "max_diff",
                            "mean_diff",
                            "atol",
                            "rtol",
                            "trials",
                            "isolation",
                            "timing_method",
                            "runtime_n",
                        )
                    }
                ]
            ),
            hide_index=True,
            key="check_table",
        )
    with related_tab:
        st.markdown("**Nearest neighbours by embedding**")
        neighbours = archive.neighbours(kernel_id)
        if neighbours.empty:
            st.caption("No embedding for this kernel (run `kernel-archive embed`).")
        else:
            kernel_table(neighbours, key="neighbours_table")
            first = neighbours.iloc[0]
            compare_link(kernel_id, first["kernel_id"], f"Compare with nearest: {first['kernel_name']}")
        st.markdown("**Lineage**")
        parents = record.get("parent_ids") or []
        if record.get("round") is not None:
            st.caption(f"optimisation round {record['round']}")
        for parent in parents:
            parent_row = archive.light_rows([parent])
            label = parent_row.iloc[0]["kernel_name"] if not parent_row.empty else parent
            kernel_link(parent, f"parent: {label}")
            compare_link(parent, kernel_id, "compare with this parent")
        children = archive.children(kernel_id)
        for row in children.itertuples(index=False):
            kernel_link(row.kernel_id, f"child: {row.kernel_name} (round {row.round}, {row.status})")
        if not parents and children.empty:
            st.caption("No parents or children (not generated by the optimisation loop, or its first attempt).")
    with details_tab:
        skip = set(HEAVY_COLUMNS) - {"seeds"}  # the big fields have tabs of their own; seeds are short and kept
        st.dataframe(
            pd.DataFrame([(k, str(v)) for k, v in record.items() if k not in skip], columns=["field", "value"]),
            hide_index=True,
            key="details_table",
        )
