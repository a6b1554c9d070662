"""/search?q=... : full-text (op names, kernel names, code) or semantic search, with the leaderboard filters."""

from __future__ import annotations

import time

import streamlit as st

from explorer.components.context import current_archive, page_errors
from explorer.components.filter_bar import filter_sidebar, url_choice
from explorer.components.links import csv_download, kernel_table
from explorer.embedder import query_encoder

with page_errors():
    archive = current_archive()
    st.title("Search")
    filters = filter_sidebar(archive, "search")
    mode = url_choice("mode", ["text", "semantic"], "text", "Search mode", "search", sidebar=False)

    url_query = st.query_params.get("q", "")
    if st.session_state.get("search_q_url") != url_query or "search_q" not in st.session_state:
        st.session_state["search_q"] = url_query
    query = st.text_input(
        "Search op names, kernel names and code",
        key="search_q",
        placeholder="e.g. __shfl_down_sync, softmax, shared memory tiling",
    )
    if query:
        st.query_params["q"] = query
    else:
        st.query_params.pop("q", None)
    st.session_state["search_q_url"] = query
    if not query:
        st.caption("Full-text finds substrings (case-insensitive); semantic ranks kernels by embedding similarity.")
        st.stop()

    started = time.perf_counter()
    results = None
    if mode == "semantic":
        encoder, problem = query_encoder(archive.embedding_model())
        if encoder is None:
            st.info(f"Semantic search unavailable: {problem}. Showing full-text results instead.")
        else:
            results = archive.nearest(encoder(query), filters)
            st.caption(f"Semantic search with {archive.embedding_model()}")
    if results is None:
        results = archive.search_text(query, filters)
    elapsed_ms = (time.perf_counter() - started) * 1000
    st.caption(f"{len(results)} results in {elapsed_ms:.0f} ms")
    if results.empty:
        st.warning("No kernel matches.")
    else:
        kernel_table(results, key="search_results")
        csv_download(results, "search_results.csv", key="search_csv")
