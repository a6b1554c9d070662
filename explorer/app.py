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

# The favicon is a file served by the app itself: a Material icon or an emoji as page_icon makes the browser fetch
# it from a font or emoji host, which an offline reader cannot reach.
st.set_page_config(page_title="Verified kernel archive", page_icon=str(_HERE / "favicon.png"), layout="wide")

# The page scripts live in app_pages/, not pages/: Streamlit runs a pages/ directory beside the main script as
# "v1" pages, without this script (no navigation, no page config), until some session first runs st.navigation,
# so a shared link as a fresh server's first request got file names for navigation and a narrow layout.
PAGES = [
    st.Page(_HERE / "app_pages/overview.py", title="Overview", icon=":material/dashboard:", default=True),
    st.Page(
        _HERE / "app_pages/leaderboard.py", title="Leaderboard", icon=":material/leaderboard:", url_path="leaderboard"
    ),
    st.Page(_HERE / "app_pages/task.py", title="Task", icon=":material/assignment:", url_path="task"),
    st.Page(_HERE / "app_pages/kernel.py", title="Kernel", icon=":material/memory:", url_path="kernel"),
    st.Page(_HERE / "app_pages/map.py", title="Map", icon=":material/scatter_plot:", url_path="map"),
    st.Page(_HERE / "app_pages/search.py", title="Search", icon=":material/search:", url_path="search"),
    st.Page(_HERE / "app_pages/compare.py", title="Compare", icon=":material/compare:", url_path="compare"),
]

navigation = st.navigation(PAGES)
current_archive(show_source=False)  # a bad source stops here with a message naming the problem
navigation.run()  # each page body runs under components.context.page_errors
