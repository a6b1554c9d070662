"""The innovation archive: the best verified kernels, offered as examples to prompts of similar tasks.

Similarity is deliberately simple: the same op category counts most, then shared tokens of the task
names (`gemm_bias_relu` and `gemm_relu` share two). If builder.embed grows a task-embedding helper this
is the one place to swap in; until then no model is loaded for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from builder import config


@dataclass
class ArchiveEntry:
    task_id: str
    task_name: str
    op_category: str
    language: str
    code: str
    runtime_ms: float | None
    summary: str


def name_tokens(name: str) -> set[str]:
    return {t for t in re.split(r"[_\W\d]+", name.lower()) if t}


def similarity(a_name: str, a_category: str, b_name: str, b_category: str) -> float:
    tokens_a, tokens_b = name_tokens(a_name), name_tokens(b_name)
    union = tokens_a | tokens_b
    jaccard = len(tokens_a & tokens_b) / len(union) if union else 0.0
    return (1.0 if a_category == b_category and a_category != "other" else 0.0) + jaccard


class InnovationArchive:
    """Keeps the fastest ranking-eligible kernel per (task, language)."""

    def __init__(self) -> None:
        self._best: dict[tuple[str, str], ArchiveEntry] = {}

    def offer(self, record: Any, task_name: str, op_category: str, summary: str) -> None:
        get = record.get if isinstance(record, dict) else lambda k: getattr(record, k, None)
        if get("status") != "correct" or not get("ranking_eligible"):
            return
        key = (get("task_id"), get("language"))
        runtime = get("runtime_ms")
        current = self._best.get(key)
        if current is not None and (
            runtime is None or (current.runtime_ms is not None and current.runtime_ms <= runtime)
        ):
            return
        self._best[key] = ArchiveEntry(
            task_id=get("task_id"),
            task_name=task_name,
            op_category=op_category,
            language=get("language"),
            code=get("cuda_code"),
            runtime_ms=runtime,
            summary=summary,
        )

    def examples_for(
        self, task_id: str, task_name: str, op_category: str, language: str, limit: int = config.LLM_ARCHIVE_EXAMPLES
    ) -> list[ArchiveEntry]:
        """Best kernels of other tasks in the same language, most similar first (only similar ones)."""
        scored = [
            (similarity(task_name, op_category, e.task_name, e.op_category), e)
            for (other_id, lang), e in self._best.items()
            if other_id != task_id and lang == language
        ]
        scored = [(s, e) for s, e in scored if s > 0]
        scored.sort(key=lambda pair: (-pair[0], pair[1].task_id))
        return [e for _, e in scored[:limit]]

    def __len__(self) -> int:
        return len(self._best)
