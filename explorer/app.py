"""Streamlit entry point: `streamlit run explorer/app.py` (normally via `kernel-archive explore [SOURCE]`).

The archive is named by the KA_EXPLORER_SOURCE environment variable (default: data/sample/, or a synthetic
archive until that exists). Pages have fixed URL paths so any view can be shared as a link.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `streamlit run` puts explorer/ on sys.path, not the repository root that holds the packages.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import streamlit as st  # noqa: E402

from explorer.components.context import current_archive  # noqa: E402

_HERE = Path(__file__).parent

st.set_page_config(page_title="Verified kernel archive", page_icon=":material/memory:", layout="wide")

PAGES = [
    st.Page(_HERE / "pages/overview.py", title="Overview", icon=":material/dashboard:", default=True),
    st.Page(_HERE / "pages/leaderboard.py", title="Leaderboard", icon=":material/leaderboard:", url_path="leaderboard"),
    st.Page(_HERE / "pages/task.py", title="Task", icon=":material/assignment:", url_path="task"),
    st.Page(_HERE / "pages/kernel.py", title="Kernel", icon=":material/memory:", url_path="kernel"),
    st.Page(_HERE / "pages/map.py", title="Map", icon=":material/scatter_plot:", url_path="map"),
    st.Page(_HERE / "pages/search.py", title="Search", icon=":material/search:", url_path="search"),
    st.Page(_HERE / "pages/compare.py", title="Compare", icon=":material/compare:", url_path="compare"),
]

navigation = st.navigation(PAGES)
current_archive(show_source=False)  # a bad source stops here with a message naming the problem
navigation.run()  # each page body runs under components.context.page_errors
