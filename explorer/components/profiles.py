"""Render the JSON profile fields of a record (ncu, torch profiler, clang-tidy) as plain tables.

The shapes come from builder/profile/; this renderer only assumes "JSON text", finds the lists of objects in
it and shows each as a table, so a richer profile needs no explorer change. Nothing is rendered as HTML.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import streamlit as st

from explorer.components.links import plain
from schemas import fields_in_group, json_fields

# The numbers promoted out of the profile JSON (NCU summary, torch-profile share, clang-tidy count), schema order.
PROFILE_NUMBERS = tuple(name for name in fields_in_group("profiles") if name not in json_fields())


def parse_json_field(text: str | None) -> tuple[Any, str | None]:
    """(parsed value, problem) — problem is the profiler's recorded error or a parse failure."""
    if text is None or text == "":
        return None, "not recorded"
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as exc:
        return None, f"unreadable JSON ({exc})"
    if isinstance(value, dict) and set(value) == {"error"}:
        return None, str(value["error"])
    return value, None


def object_lists(value: Any, prefix: str = "") -> dict[str, pd.DataFrame]:
    """Every list of objects inside `value`, keyed by its dotted path, as DataFrames (nested values as JSON)."""
    found: dict[str, pd.DataFrame] = {}
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        rows = [{k: (json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in item.items()} for item in value]
        found[prefix or "items"] = pd.DataFrame(rows)
        for i, item in enumerate(value):
            for key, sub in item.items():
                if isinstance(sub, (list, dict)):
                    found.update(object_lists(sub, f"{prefix}[{i}].{key}"))
    elif isinstance(value, dict):
        for key, sub in value.items():
            found.update(object_lists(sub, f"{prefix}.{key}" if prefix else key))
    return found


def scalars(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if not isinstance(v, (list, dict))} | {
        f"{k}.{kk}": vv
        for k, v in value.items()
        if isinstance(v, dict)
        for kk, vv in v.items()
        if not isinstance(vv, (list, dict))
    }


def profile_section(title: str, text: str | None, key: str) -> None:
    st.markdown(f"**{title}**")
    value, problem = parse_json_field(text)
    if problem:
        st.caption(plain(f"{title}: {problem}"))
        return
    summary = scalars(value)
    if summary:
        st.dataframe(pd.DataFrame([summary]), hide_index=True, key=f"{key}_summary")
    for path, frame in object_lists(value).items():
        st.caption(plain(path))  # keys of the archive's JSON
        st.dataframe(frame, hide_index=True, key=f"{key}_{path}")


def clang_tidy_diagnostics(text: str | None) -> pd.DataFrame | None:
    value, _problem = parse_json_field(text)
    if isinstance(value, dict) and isinstance(value.get("diagnostics"), list):
        frame = pd.DataFrame(value["diagnostics"])
        return frame.sort_values("line") if "line" in frame else frame
    return None
