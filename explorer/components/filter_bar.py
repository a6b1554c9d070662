"""Filter widgets in the sidebar whose state lives in the URL query (shareable views)."""

from __future__ import annotations

import streamlit as st

from explorer.components.links import plain
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


def read_url_filters() -> tuple[Filters, list[str]]:
    """The URL's filters and a sentence for each value in it that is not understood."""
    return Filters.parse_query_params(st.query_params)


def warn_not_understood(problems: list[str]) -> None:
    """One warning naming every URL value that was left out (as plain text: it is whatever the link said)."""
    if problems:
        st.warning(plain("Left out of this view, not understood: " + "; ".join(problems) + "."))


def filter_sidebar(archive: Archive, page: str, keys: tuple[str, ...] = tuple(LIST_FILTERS)) -> Filters:
    """Render filters for `page`, seeded from the URL, and write the chosen state back to the URL. A URL value
    that is not understood (an unknown task, a level the archive lacks, min_speedup=nan) is named on the page;
    the other filters still apply."""
    url_filters, problems = read_url_filters()
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
            wanted = getattr(url_filters, key)
            if reseed:
                problems += [f"{_LABELS[key].lower()} {v!r} (not in this archive)" for v in wanted if v not in options]
            if reseed or widget_key not in st.session_state:
                st.session_state[widget_key] = [v for v in wanted if v in options]
            chosen[key] = tuple(
                st.multiselect(_LABELS[key], options, key=widget_key, format_func=_formatter(archive, key))
            )
        speed_key = f"{page}_filter_min_speedup"
        if reseed or speed_key not in st.session_state:
            st.session_state[speed_key] = float(url_filters.min_speedup or 0.0)
        min_speedup = st.number_input("Min speedup vs eager (0 = off)", min_value=0.0, step=0.5, key=speed_key)
    if reseed:
        warn_not_understood(problems)
    filters = Filters(**chosen, min_speedup=min_speedup or None)
    _write_url(filters)
    st.session_state[snapshot_key] = _url_state()
    return filters


def _formatter(archive: Archive, key: str):
    """Tasks read "1/23 · softmax" (typing a name finds them); flags' `none` says what it means."""
    if key == "task":
        names = archive.task_names()
        return lambda task_id: f"{task_id} · {names.get(task_id) or '?'}"
    if key == "flag":
        return lambda flag: "no flag" if flag == NO_FLAGS else flag
    return str


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


def url_choice(
    name: str,
    options: list[str],
    default: str,
    label: str,
    page: str,
    sidebar: bool = True,
    labels: dict[str, str] | None = None,
) -> str:
    """A selectbox mirrored in the URL query param `name` (e.g. sort column, colour); `labels` are the words
    shown for the options. A value the URL gives that is not an option is named on the page."""
    current = st.query_params.get(name, default)
    widget_key = f"{page}_{name}"
    snapshot_key = f"{page}_{name}_url"
    if current not in options:
        words = (labels or {}).get(default, default)
        st.warning(plain(f"Left out of this view, not understood: {name} {current!r} (using {words})."))
        current = default
    if st.session_state.get(snapshot_key) != current or widget_key not in st.session_state:
        st.session_state[widget_key] = current
    container = st.sidebar if sidebar else st
    shown = labels or {}
    value = container.selectbox(label, options, key=widget_key, format_func=lambda v: shown.get(v, v))
    if value == default:
        st.query_params.pop(name, None)
    else:
        st.query_params[name] = value
    st.session_state[snapshot_key] = value
    return value
