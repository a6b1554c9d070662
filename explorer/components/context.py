"""The archive behind this app run, opened once per source and shared by every session."""

from __future__ import annotations

import streamlit as st

from builder.errors import ArchiveError
from explorer.query import Archive
from explorer.sources import resolve_source, source_from_env


@st.cache_resource(show_spinner="Opening the archive ...")
def _open(spec: str) -> Archive:
    return Archive(resolve_source(spec))


def current_archive() -> Archive:
    """The archive named by the environment (set by `kernel-archive explore`); stops the page with a message."""
    spec = source_from_env()
    try:
        return _open(spec)
    except ArchiveError as exc:  # a bad source: say what is wrong in the app, never a traceback
        st.error(f"Cannot open the archive: {exc}")
        st.stop()
        raise  # unreachable: st.stop() ends the run


def source_banner(archive: Archive) -> None:
    for note in archive.source.notes:
        st.warning(note, icon=":material/info:")
