"""Links between pages (fixed URL paths) and tables whose rows link to kernel pages."""

from __future__ import annotations

import re
from urllib.parse import quote

import pandas as pd
import streamlit as st

from builder import config

PAGE_FILES = {
    "overview": "app_pages/overview.py",
    "leaderboard": "app_pages/leaderboard.py",
    "task": "app_pages/task.py",
    "kernel": "app_pages/kernel.py",
    "map": "app_pages/map.py",
    "search": "app_pages/search.py",
    "compare": "app_pages/compare.py",
}
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def plain(text: object) -> str:
    """Escape Markdown so archive text shows literally where Streamlit renders labels as Markdown."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", str(text))


def kernel_link(kernel_id: str, label: str, key_hint: str = "") -> None:
    st.page_link(PAGE_FILES["kernel"], label=plain(label), query_params={"id": kernel_id}, icon=":material/memory:")


def task_link(task_id: str, label: str | None = None) -> None:
    st.page_link(
        PAGE_FILES["task"],
        label=plain(label or f"task {task_id}"),
        query_params={"id": task_id},
        icon=":material/assignment:",
    )


def compare_link(a: str, b: str, label: str) -> None:
    st.page_link(PAGE_FILES["compare"], label=plain(label), query_params={"a": a, "b": b}, icon=":material/compare:")


def with_links(frame: pd.DataFrame) -> pd.DataFrame:
    """Add URL columns (relative to the app root) for kernel and task pages."""
    out = frame.copy()
    if "kernel_id" in out:
        out.insert(0, "kernel", "kernel?id=" + out["kernel_id"].astype(str))
    if "task_id" in out:
        out.insert(1 if "kernel" in out else 0, "task", "task?id=" + out["task_id"].astype(str))
    return out


def kernel_table(frame: pd.DataFrame, key: str, height: int | None = None) -> None:
    """A table whose kernel/task columns are links; flags and tags shown as lists."""
    shown = with_links(frame.head(config.EXPLORER_TABLE_ROWS))
    column_config = {
        "kernel": st.column_config.LinkColumn("kernel", display_text=r"kernel\?id=(.{8})"),
        "task": st.column_config.LinkColumn("task", display_text=r"task\?id=(.*)"),
        "kernel_id": None,
        "flags": st.column_config.ListColumn("flags"),
        "strategy_tags": st.column_config.ListColumn("strategy tags"),
    }
    for name in ("speedup_eager", "speedup_compile", "geomean_speedup", "similarity"):
        column_config[name] = st.column_config.NumberColumn(name, format="%.3f")
    for name in ("runtime_ms", "eager_ms", "compile_ms"):
        column_config[name] = st.column_config.NumberColumn(name, format="%.4f")
    st.dataframe(shown, column_config=column_config, hide_index=True, key=key, height=height or "auto")


def markdown_cell(text: object) -> str:
    """Archive text as one Markdown table cell: shown literally, on one line."""
    return plain(" ".join(str(text).split()))


def markdown_kernel_table(frame: pd.DataFrame) -> None:
    """A short kernel list as a Markdown table whose kernel and task cells link to their pages.

    For a few rows on a summary page: Markdown is drawn with the app itself, where st.dataframe first loads its
    grid (~1.2 MB of JavaScript to parse; ~0.3-0.4 s of the overview's cold start on the 2-core box).
    """
    if frame.empty:
        st.caption("No ranking-eligible kernels yet.")
        return
    rows = [
        "| kernel | task | op | model | runtime (ms) | vs eager | vs torch.compile |",
        "|---|---|---|---|--:|--:|--:|",
    ]
    for row in frame.itertuples(index=False):
        kernel = f"[{markdown_cell(row.kernel_name)}](kernel?id={quote(str(row.kernel_id), safe='')})"
        task = f"[{markdown_cell(row.task_id)}](task?id={quote(str(row.task_id), safe='/')})"
        numbers = [
            _number(row.runtime_ms, "{:.4f}"),
            _number(row.speedup_eager, "{:.2f}x"),
            _number(row.speedup_compile, "{:.2f}x"),
        ]
        rows.append(
            "| " + " | ".join([kernel, task, markdown_cell(row.op_name), markdown_cell(row.model), *numbers]) + " |"
        )
    st.markdown("\n".join(rows))


def _number(value: object, pattern: str) -> str:
    return "–" if value is None or pd.isna(value) else pattern.format(value)


def quick_links(frame: pd.DataFrame, label_column: str = "kernel_name", n: int = config.EXPLORER_QUICK_LINKS) -> None:
    """Page links for the first rows (Streamlit table links open new tabs; these stay in the app)."""
    if frame.empty:
        return
    columns = st.columns(2)
    for i, row in enumerate(frame.head(n).itertuples(index=False)):
        with columns[i % 2]:
            kernel_link(row.kernel_id, f"{getattr(row, label_column)} ({row.task_id})")


def csv_download(frame: pd.DataFrame, name: str, key: str) -> None:
    st.download_button(
        f"Download CSV ({len(frame)} rows)",
        frame.to_csv(index=False).encode(),
        file_name=name,
        mime="text/csv",
        key=key,
        icon=":material/download:",
    )
