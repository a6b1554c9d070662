"""Arguments shared by the commands that run one candidate (`verify`, `profile`): one set of checks, one
set of messages."""

from __future__ import annotations

from pathlib import Path

import typer

from builder.candidates import Candidate, language_of
from builder.errors import UsageError
from builder.tasks import Task, resolve_task

BACKENDS = ("cuda", "cpu")


def default_backend() -> str:
    import torch

    if torch.cuda.is_available():
        return "cuda"
    typer.echo("notice: no GPU visible, using the cpu backend (--backend cpu)", err=True)
    return "cpu"


def resolve_candidate(
    candidate: Path, task: str, suite: Path | None, backend: str | None
) -> tuple[Candidate, Task, str]:
    """The candidate file, its task and the backend, or a UsageError naming what is wrong."""
    if not candidate.is_file():
        raise UsageError(f"candidate file not found: {candidate}")
    try:
        language_of(candidate)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if backend is not None and backend not in BACKENDS:
        raise UsageError(f"--backend must be cuda or cpu, not {backend!r}")
    chosen_task = resolve_task(task, suite)
    try:
        chosen = Candidate.from_file(candidate, chosen_task.id)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read candidate {candidate}: {exc}") from None
    backend = backend or default_backend()
    if backend == "cpu" and chosen.language == "cuda":
        raise UsageError(f"{candidate}: a .cu candidate needs --backend cuda (write a .cpp for the cpu backend)")
    return chosen, chosen_task, backend
