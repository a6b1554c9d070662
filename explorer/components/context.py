"""The archive behind this app run, opened once per source and shared by every session."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from builder import config
from builder.errors import ArchiveError
from explorer import preload
from explorer.components.links import plain
from explorer.embedder import query_encoder
from explorer.query import Archive
from explorer.sources import resolve_source, source_from_env

# Streamlit shimmers a skeleton where each lazily loaded element (chart, table) will appear. A browser without a
# GPU (VMs, remote desktops, headless Chromium with SwiftShader) composites every frame of that shimmer on the
# CPU: on the 2-core benchmark box it took ~2.5 s of CPU per map page load, slowing the very chart it stood in
# for (docs/explorer.md). The placeholders stay, still.
STILL_SKELETONS = "<style>[data-testid='stSkeleton'] { animation: none !important; }</style>"


@st.cache_resource(show_spinner="Opening the archive ...")
def _open(spec: str) -> Archive:
    archive = preload.take(spec) or Archive(resolve_source(spec))
    preload.freeze_heap()
    threading.Thread(target=_warm_up, args=(archive,), name="explorer-warm-up", daemon=True).start()
    return archive


def _warm_up(archive: Archive) -> None:
    """Load the embedding matrix, the query model and the full-text word index in the background (seconds each,
    once per server), after the first page had the CPU, so the first search or neighbour list does not pay."""
    time.sleep(config.EXPLORER_WARM_UP_DELAY_S)
    try:
        archive.embeddings()
        query_encoder(archive.embedding_model())
    except Exception:  # noqa: BLE001 - the search page reports these problems when a user gets there
        pass
    try:
        archive.ensure_search_index()
    except Exception:  # noqa: BLE001 - a full-text search reports it (an ArchiveError) when a user asks
        pass
    preload.freeze_heap(collect_first=True)


def current_archive(show_source: bool = True) -> Archive:
    """The archive named by the environment (set by `kernel-archive explore`); stops the page with a message.

    Pages call this with show_source=True so each page carries the source caption, its caveats (synthetic,
    imported) and the page style itself, whichever way it was reached (the entry script's own elements are not
    shown when a page other than the overview is opened by its URL).
    """
    spec = source_from_env()
    try:
        archive = _open(spec)
    except ArchiveError as exc:  # a bad source: say what is wrong in the app, never a traceback
        st.error(plain(f"Cannot open the archive: {exc}"))
        st.stop()
        raise  # unreachable: st.stop() ends the run
    if show_source:
        st.html(STILL_SKELETONS)
        st.sidebar.caption(plain(f"Source: {archive.source.label} ({archive.size:,} kernels)"))
        source_banner(archive)
    return archive


def source_banner(archive: Archive) -> None:
    for note in archive.source.notes:
        st.warning(plain(note), icon=":material/info:")


@contextmanager
def page_errors() -> Iterator[None]:
    """Wrap a page body: an ArchiveError (files gone or damaged since the app started) becomes a message.

    Streamlit runs page scripts itself and would show a traceback, so each page catches this in its own body.
    """
    try:
        yield
    except ArchiveError as exc:
        st.error(plain(f"Cannot read the archive: {exc}"))
