"""The overview's Markdown kernel table: archive text shows literally, links point at the right pages."""

from __future__ import annotations

import pandas as pd
import pytest
from markdown_it import MarkdownIt

from explorer.components import links

HOSTILE_NAMES = [
    "plain_kernel",
    "<img src=x onerror=alert(1)>",
    "pipe | in | name",
    "**bold** _it_ `code` [x](javascript:alert(1))",
    "two\nlines\r\nand\ttab",
    "back\\slash & #hash ~tilde~ $math$",
]


def rendered_table(frame: pd.DataFrame, monkeypatch) -> str:
    shown: list[str] = []
    monkeypatch.setattr(links.st, "markdown", lambda body, **_: shown.append(body))
    links.markdown_kernel_table(frame)
    assert len(shown) == 1
    return shown[0]


def table_rows(markdown: str) -> list[list[tuple[str, str | None]]]:
    """Each body row as (cell text, link href or None), parsed as GitHub-flavoured Markdown."""
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    assert not [t for t in tokens if t.type in ("html_block", "html_inline")]
    rows, row, in_body = [], None, False
    for token in tokens:
        if token.type == "tbody_open":
            in_body = True
        elif in_body and token.type == "tr_open":
            row = []
        elif in_body and token.type == "inline" and row is not None:
            assert not [c for c in token.children if c.type == "html_inline"]
            text = "".join(c.content for c in token.children if c.type in ("text", "code_inline"))
            hrefs = [c.attrs["href"] for c in token.children if c.type == "link_open"]
            row.append((text, hrefs[0] if hrefs else None))
        elif in_body and token.type == "tr_close":
            rows.append(row)
            row = None
    return rows


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_archive_text_is_shown_literally_in_one_row(name, monkeypatch):
    frame = pd.DataFrame(
        [
            {
                "kernel_id": "ab/c?d",
                "kernel_name": name,
                "task_id": "2/17",
                "op_name": name,
                "model": "m|x",
                "runtime_ms": 0.25,
                "speedup_eager": 3.0,
                "speedup_compile": None,
            }
        ]
    )
    rows = table_rows(rendered_table(frame, monkeypatch))
    assert len(rows) == 1
    (task, task_href), (kernel, kernel_href), eager, compile_, runtime, (op, _), (model, _) = rows[0]
    assert kernel == op == " ".join(name.split())  # literal text, whitespace folded onto one line
    assert model == "m|x"
    assert kernel_href == "kernel?id=ab%2Fc%3Fd" and (task, task_href) == ("2/17", "task?id=2/17")
    assert [eager[0], compile_[0], runtime[0]] == ["3.00", "–", "0.2500"]


def test_rows_follow_the_frame_and_an_empty_frame_says_so(monkeypatch):
    frame = pd.DataFrame(
        [
            {
                "kernel_id": f"id{i}",
                "kernel_name": f"k{i}",
                "task_id": f"1/{i}",
                "op_name": "op",
                "model": "m",
                "runtime_ms": 1.0,
                "speedup_eager": 10.0 - i,
                "speedup_compile": 1.0,
            }
            for i in range(5)
        ]
    )
    rows = table_rows(rendered_table(frame, monkeypatch))
    assert [row[1][1] for row in rows] == [f"kernel?id=id{i}" for i in range(5)]
    captions: list[str] = []
    monkeypatch.setattr(links.st, "caption", lambda body, **_: captions.append(body))
    monkeypatch.setattr(links.st, "markdown", lambda *_, **__: pytest.fail("no table for no kernels"))
    links.markdown_kernel_table(frame.iloc[:0])
    assert captions == ["No ranking-eligible kernels yet."]


def test_headers_lead_with_task_kernel_speedups_and_runtime_and_skip_an_empty_model(monkeypatch):
    frame = pd.DataFrame(
        [
            {
                "kernel_id": "a",
                "kernel_name": "k",
                "task_id": "1/1",
                "op_name": "op",
                "model": None,
                "runtime_ms": 1.0,
                "speedup_eager": 2.0,
                "speedup_compile": 1.5,
            }
        ]
    )
    header = rendered_table(frame, monkeypatch).splitlines()[0]
    assert [cell.strip() for cell in header.strip("|").split("|")] == [
        "Task",
        "Kernel",
        "Speedup vs eager (×)",
        "Speedup vs torch.compile (×)",
        "Runtime (ms)",
        "Op",
    ]


def test_kernel_tables_link_by_name_in_a_fixed_column_order_without_empty_columns():
    frame = pd.DataFrame(
        [
            {
                "kernel_id": "id1",
                "task_id": "1/2",
                "op_name": "op",
                "kernel_name": "my kernel",
                "model": None,
                "experiment": None,
                "status": "correct",
                "runtime_ms": 1.0,
                "speedup_eager": 2.0,
                "speedup_compile": 1.0,
                "strategy_tags": ["naive"],
            }
        ]
    )
    shown = links.with_links(frame)
    assert shown["kernel"].iloc[0] == "kernel?id=id1#my%20kernel"
    # The Task column reads "1/2 · op" (the grid decodes the fragment it shows); the link is the task page.
    assert shown["task"].iloc[0] == "task?id=1/2#1%2F2%20%C2%B7%20op"
    assert links.shown_columns(shown) == [
        "task",
        "kernel",
        "speedup_eager",
        "speedup_compile",
        "runtime_ms",
        "op_name",
        "status",
        "strategy_tags",
    ]
