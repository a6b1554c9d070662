"""/search?q=... : full-text (op names, kernel names, code) or semantic search, with the leaderboard filters."""

from __future__ import annotations

import time

import streamlit as st

from explorer.components.context import current_archive, page_errors
from explorer.components.filter_bar import filter_sidebar, url_choice
from explorer.components.links import csv_download, kernel_table, plain
from explorer.embedder import query_encoder

MODES = {"text": "Full text", "semantic": "Semantic"}

with page_errors():
    archive = current_archive()
    st.title("Search")
    filters = filter_sidebar(archive, "search")
    mode = url_choice("mode", list(MODES), "text", "Search mode", "search", sidebar=False, labels=MODES)

    url_query = st.query_params.get("q", "")
    if st.session_state.get("search_q_url") != url_query or "search_q" not in st.session_state:
        st.session_state["search_q"] = url_query
    query = st.text_input(
        "Search op names, task names, kernel names, strategy tags and code",
        key="search_q",
        placeholder='e.g. shared memory tiling, softmax warp reduction, "__shfl_down_sync"',
    )
    if query:
        st.query_params["q"] = query
    else:
        st.query_params.pop("q", None)
    st.session_state["search_q_url"] = query
    if not query:
        st.caption(
            "Full-text finds kernels containing all the words, in any order (tiling also finds tile and tiled), "
            'best matches first; "quoted words" must appear exactly. Semantic ranks kernels by embedding similarity.'
        )
        st.stop()

    started = time.perf_counter()
    results = None
    if mode == "semantic":
        encoder, problem = query_encoder(archive.embedding_model())
        if encoder is None:
            st.info(plain(f"Semantic search unavailable: {problem}. Showing full-text results instead."))
        else:
            results = archive.nearest(encoder(query), filters)
            heading = f"The {len(results):,} nearest kernels"  # a ranking of every kernel: its head is listed
            note = plain(f"by embedding similarity ({archive.embedding_model()})")
    if results is None:
        results = archive.search_text(query, filters)
        heading = f"{len(results):,} {'kernel' if len(results) == 1 else 'kernels'} found"  # every match
        note = "containing every word, best matches first"
    elapsed_ms = (time.perf_counter() - started) * 1000
    st.subheader(heading)
    st.caption(f"{note}; {elapsed_ms:.0f} ms")
    if results.empty:
        st.warning("No kernel matches.")
    else:
        kernel_table(results.drop(columns=["score"], errors="ignore"), key="search_results")
        csv_download(results, "search_results.csv", key="search_csv")
