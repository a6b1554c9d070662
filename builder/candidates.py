"""A candidate kernel: source plus provenance, before verification."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

LANGUAGE_BY_SUFFIX = {".cu": "cuda", ".cpp": "cpp", ".cc": "cpp", ".py": "python"}


def kernel_id(task_id: str, source: str) -> str:
    """Content hash identifying a kernel for a task: the same source on the same task is the same kernel."""
    digest = hashlib.sha256(f"{task_id}\n{source}".encode()).hexdigest()
    return digest[:20]


def language_of(path: str | Path) -> str:
    suffix = Path(path).suffix
    if suffix not in LANGUAGE_BY_SUFFIX:
        raise ValueError(f"{path}: candidates are .cu (CUDA), .cpp (CPU extension) or .py (ModelNew) files")
    return LANGUAGE_BY_SUFFIX[suffix]


@dataclass
class Candidate:
    task_id: str
    source: str
    language: str  # cuda | cpp | python
    kernel_name: str
    generator: str = "manual"  # bundled | llm | import | manual
    model: str | None = None
    experiment: str | None = None
    parent_ids: list[str] = field(default_factory=list)
    round: int | None = None
    source_ref: str | None = None
    strategy_declared: list[str] = field(default_factory=list)
    designed_verdict: str | None = None
    designed_flags: list[str] = field(default_factory=list)  # bundled metadata; not a record field
    claimed_correct: bool | None = None
    claimed_speedup: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None

    @property
    def kernel_id(self) -> str:
        return kernel_id(self.task_id, self.source)

    @classmethod
    def from_file(cls, path: str | Path, task_id: str, **provenance) -> Candidate:
        path = Path(path)
        return cls(
            task_id=task_id,
            source=path.read_text(),
            language=language_of(path),
            kernel_name=provenance.pop("kernel_name", path.stem),
            source_ref=provenance.pop("source_ref", str(path)),
            **provenance,
        )

    def provenance_fields(self) -> dict:
        """The record fields this candidate fills (identity and provenance; the verifier adds the rest)."""
        return {
            "kernel_id": self.kernel_id,
            "kernel_name": self.kernel_name,
            "language": self.language,
            "cuda_code": self.source,
            "generator": self.generator,
            "model": self.model,
            "experiment": self.experiment,
            "parent_ids": list(self.parent_ids),
            "round": self.round,
            "source_ref": self.source_ref,
            "strategy_declared": list(self.strategy_declared),
            "designed_verdict": self.designed_verdict,
            "claimed_correct": self.claimed_correct,
            "claimed_speedup": self.claimed_speedup,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
        }
