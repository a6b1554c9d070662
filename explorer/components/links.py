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


# Streamlit's Markdown turns text that merely looks like a URL, an e-mail address or an emoji code into a link or
# a picture *after* parsing, so escaping cannot stop it; inside a code span it stays text.
_AUTOLINKED = re.compile(r"[^\s|]*(?:://|www\.|@|:\w+:)[^\s|]*")


def plain(text: object) -> str:
    """Archive or URL text as Markdown that shows exactly these characters, where Streamlit renders Markdown
    (titles, captions, messages, link labels): special characters escaped, URL-like words in code spans."""
    text = str(text)
    out, end = [], 0
    for match in _AUTOLINKED.finditer(text):
        out += [_MARKDOWN_SPECIAL.sub(r"\\\1", text[end : match.start()]), _code_span(match.group())]
        end = match.end()
    out.append(_MARKDOWN_SPECIAL.sub(r"\\\1", text[end:]))
    return "".join(out)


def _code_span(word: str) -> str:
    """`word` as a code span: a fence of more backticks than any run inside, padded when it touches one."""
    fence = "`" * (max((len(run) for run in re.findall(r"`+", word)), default=0) + 1)
    pad = " " if word.startswith("`") or word.endswith("`") else ""
    return f"{fence}{pad}{word}{pad}{fence}"


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


# Kernel tables lead with what a reader compares (task, kernel, both speedups, runtime); then the rest.
TABLE_ORDER = (
    "task",
    "kernel",
    "speedup_eager",
    "speedup_compile",
    "runtime_ms",
    "speed_of_light",
    "floor_ms",
    "op_name",
    "status",
    "flags",
    "strategy_tags",
    "model",
    "experiment",
    "eager_ms",
    "compile_ms",
    "similarity",
    "n_eligible",
)
HEADERS = {
    "task": "Task",
    "kernel": "Kernel",
    "speedup_eager": "Speedup vs eager (×)",
    "speedup_compile": "Speedup vs torch.compile (×)",
    "runtime_ms": "Runtime (ms)",
    "op_name": "Op",
    "status": "Status",
    "flags": "Flags",
    "strategy_tags": "Strategy tags",
    "model": "Model",
    "experiment": "Experiment",
    "eager_ms": "Eager (ms)",
    "compile_ms": "torch.compile (ms)",
    "similarity": "Similarity",
    "n_eligible": "Eligible kernels",
    "floor_ms": "Floor (ms)",
    "speed_of_light": "Speed of light (floor ÷ runtime)",
}


def with_links(frame: pd.DataFrame) -> pd.DataFrame:
    """Link columns in place of the ids: `kernel` (its URL ends in #name, shown as the link's text) and `task`."""
    out = frame.copy()
    if "kernel_id" in out:
        names = out["kernel_name"] if "kernel_name" in out else out["kernel_id"]
        out["kernel"] = (
            "kernel?id=" + out["kernel_id"].astype(str) + "#" + names.astype(str).map(lambda n: quote(n, safe=""))
        )
    if "task_id" in out:
        # "1/23 · softmax": the task's number and name, so a reader need not scroll to the Op column
        labels = out["task_id"].astype(str)
        if "op_name" in out:
            labels = labels + out["op_name"].map(lambda n: f" · {n}" if isinstance(n, str) and n else "")
        out["task"] = "task?id=" + out["task_id"].astype(str) + "#" + labels.map(lambda n: quote(n, safe=""))
    return out


def shown_columns(frame: pd.DataFrame) -> list[str]:
    """Columns a kernel table shows, in TABLE_ORDER: ids and names are in the link columns, and a column empty
    for every row (no model or experiment recorded in the archive) says nothing."""
    hidden = {"kernel_id", "kernel_name", "task_id"}
    present = [c for c in frame.columns if c not in hidden and frame[c].notna().any()]
    return sorted(present, key=lambda c: (TABLE_ORDER.index(c) if c in TABLE_ORDER else len(TABLE_ORDER), c))


def kernel_table(frame: pd.DataFrame, key: str, height: int | None = None, noun: str = "kernels") -> None:
    """A kernel table: the Kernel column links to the kernel page, the Task column to the task page; human headers
    with units; columns empty for the archive hidden. Every row is reachable: a frame longer than a page says
    its true total and which rows are shown, with the page to show chosen below it."""
    start = page_start(len(frame), key, noun)
    shown = with_links(frame.iloc[start : start + config.EXPLORER_TABLE_ROWS])
    column_config: dict = {name: HEADERS.get(name, name) for name in shown.columns}
    column_config["kernel"] = st.column_config.LinkColumn(HEADERS["kernel"], display_text=r"#(.*)$")
    column_config["task"] = st.column_config.LinkColumn(HEADERS["task"], display_text=r"#(.*)$")
    for name in ("flags", "strategy_tags"):
        column_config[name] = st.column_config.ListColumn(HEADERS[name])
    for name in ("speedup_eager", "speedup_compile", "similarity", "speed_of_light"):
        column_config[name] = st.column_config.NumberColumn(HEADERS[name], format="%.3f")
    for name in ("runtime_ms", "eager_ms", "compile_ms", "floor_ms"):
        column_config[name] = st.column_config.NumberColumn(HEADERS[name], format="%.4f")
    st.dataframe(
        shown,
        column_order=shown_columns(shown),
        column_config=column_config,
        hide_index=True,
        key=key,
        height=height or "auto",
    )


def page_start(total: int, key: str, noun: str) -> int:
    """The first row of the page of a `total`-row table to show; with more than one page, a caption with the
    true total and a page picker."""
    rows = config.EXPLORER_TABLE_ROWS
    if total <= rows:
        return 0
    pages = -(-total // rows)
    page = int(st.session_state.get(f"{key}_page", 1))
    page = min(max(page, 1), pages)
    start = (page - 1) * rows
    st.caption(f"{noun.capitalize()} {start + 1:,}–{min(start + rows, total):,} of {total:,} (page {page} of {pages}).")
    st.number_input(f"Page (of {pages:,})", min_value=1, max_value=pages, step=1, key=f"{key}_page")
    return start


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
    with_model = "model" in frame and frame["model"].notna().any()  # none recorded: no empty column
    headers = [HEADERS[c] for c in ("task", "kernel", "speedup_eager", "speedup_compile", "runtime_ms", "op_name")]
    headers += [HEADERS["model"]] if with_model else []
    rows = ["| " + " | ".join(headers) + " |", "|---|---|--:|--:|--:|---|" + ("---|" if with_model else "")]
    for row in frame.itertuples(index=False):
        kernel = f"[{markdown_cell(row.kernel_name)}](kernel?id={quote(str(row.kernel_id), safe='')})"
        task = f"[{markdown_cell(row.task_id)}](task?id={quote(str(row.task_id), safe='/')})"
        numbers = [
            _number(row.speedup_eager, "{:.2f}"),
            _number(row.speedup_compile, "{:.2f}"),
            _number(row.runtime_ms, "{:.4f}"),
        ]
        cells = [task, kernel, *numbers, markdown_cell(row.op_name)]
        cells += [markdown_cell(row.model)] if with_model else []
        rows.append("| " + " | ".join(cells) + " |")
    st.markdown("\n".join(rows))


def _number(value: object, pattern: str) -> str:
    return "–" if value is None or pd.isna(value) else pattern.format(value)


def csv_download(frame: pd.DataFrame, name: str, key: str) -> None:
    """Every row of `frame`, written as CSV only when the button is pressed (100k rows take a second)."""
    st.download_button(
        f"Download CSV (all {len(frame):,} rows)",
        lambda: frame.to_csv(index=False).encode(),
        file_name=name,
        mime="text/csv",
        key=key,
        icon=":material/download:",
    )
