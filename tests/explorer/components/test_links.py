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
    (kernel, kernel_href), (task, task_href), (op, _), (model, _), runtime, eager, compile_ = rows[0]
    assert kernel == op == " ".join(name.split())  # literal text, whitespace folded onto one line
    assert model == "m|x"
    assert kernel_href == "kernel?id=ab%2Fc%3Fd" and (task, task_href) == ("2/17", "task?id=2/17")
    assert [runtime[0], eager[0], compile_[0]] == ["0.2500", "3.00x", "–"]


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
    assert [row[0][1] for row in rows] == [f"kernel?id=id{i}" for i in range(5)]
    captions: list[str] = []
    monkeypatch.setattr(links.st, "caption", lambda body, **_: captions.append(body))
    monkeypatch.setattr(links.st, "markdown", lambda *_, **__: pytest.fail("no table for no kernels"))
    links.markdown_kernel_table(frame.iloc[:0])
    assert captions == ["No ranking-eligible kernels yet."]
