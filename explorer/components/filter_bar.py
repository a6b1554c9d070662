"""Filter widgets in the sidebar whose state lives in the URL query (shareable views)."""

from __future__ import annotations

import streamlit as st

from builder.errors import UsageError
from explorer.filters import LIST_FILTERS, NO_FLAGS, Filters
from explorer.query import Archive

_LABELS = {
    "level": "Level",
    "task": "Task",
    "category": "Op category",
    "model": "Model",
    "experiment": "Experiment",
    "status": "Status",
    "flag": "Flags",
    "tag": "Strategy tag",
}
_SNAPSHOT = "_filters_url_snapshot"


def _url_state() -> dict[str, list[str]]:
    """The filter part of the URL (other params, e.g. sort, change independently)."""
    return {key: st.query_params.get_all(key) for key in [*LIST_FILTERS, "min_speedup"] if key in st.query_params}


def read_url_filters() -> Filters:
    try:
        return Filters.from_query_params(st.query_params)
    except UsageError as exc:
        st.warning(f"Ignoring filters in the URL: {exc}")
        return Filters()


def filter_sidebar(archive: Archive, page: str, keys: tuple[str, ...] = tuple(LIST_FILTERS)) -> Filters:
    """Render filters for `page`, seeded from the URL, and write the chosen state back to the URL."""
    url_filters = read_url_filters()
    snapshot_key = f"{_SNAPSHOT}_{page}"
    url_now = _url_state()
    reseed = st.session_state.get(snapshot_key) != url_now  # opened from a link or edited URL: the URL wins
    chosen: dict = {}
    with st.sidebar:
        st.subheader("Filters")
        for key in keys:
            column = LIST_FILTERS[key][0]
            options = [str(v) for v in archive.options(column)]
            if key == "flag":
                options = [NO_FLAGS, *options]
            widget_key = f"{page}_filter_{key}"
            from_url = [v for v in getattr(url_filters, key) if v in options]
            if reseed or widget_key not in st.session_state:
                st.session_state[widget_key] = from_url
            chosen[key] = tuple(st.multiselect(_LABELS[key], options, key=widget_key))
        speed_key = f"{page}_filter_min_speedup"
        if reseed or speed_key not in st.session_state:
            st.session_state[speed_key] = float(url_filters.min_speedup or 0.0)
        min_speedup = st.number_input("Min speedup vs eager (0 = off)", min_value=0.0, step=0.5, key=speed_key)
    filters = Filters(**chosen, min_speedup=min_speedup or None)
    _write_url(filters)
    st.session_state[snapshot_key] = _url_state()
    return filters


def _write_url(filters: Filters) -> None:
    wanted = filters.to_query_params()
    for key in [*LIST_FILTERS, "min_speedup"]:
        if key not in wanted and key in st.query_params:
            del st.query_params[key]
    for key, value in wanted.items():
        current = st.query_params.get_all(key)
        target = value if isinstance(value, list) else [value]
        if current != target:
            st.query_params[key] = value


def url_choice(name: str, options: list[str], default: str, label: str, page: str, sidebar: bool = True) -> str:
    """A selectbox mirrored in the URL query param `name` (e.g. sort column, colour)."""
    current = st.query_params.get(name, default)
    if current not in options:
        current = default
    widget_key = f"{page}_{name}"
    snapshot_key = f"{page}_{name}_url"
    if st.session_state.get(snapshot_key) != current or widget_key not in st.session_state:
        st.session_state[widget_key] = current
    container = st.sidebar if sidebar else st
    value = container.selectbox(label, options, key=widget_key)
    if value == default:
        st.query_params.pop(name, None)
    else:
        st.query_params[name] = value
    st.session_state[snapshot_key] = value
    return value
