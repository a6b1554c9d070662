"""Failures of the builder's own machinery, told apart from the candidate's (trusted parent side).

A sandbox that cannot start, an interpreter it cannot see, a missing or killed compiler, a full disk, a CUDA
context that cannot be made or a lost device say nothing about the kernel being verified. Such a failure is
first only *suspected*, from what the child left behind (`sandbox/suspects.py`):
those texts pass through candidate code, which may print anything. The control kernel decides
(`preflight.confirm`): where it fails too, the failure is the machinery's and becomes an `InfrastructureFailure`,
which no one stores or caches (the build puts the pair back and stops after a few in a row); where it passes, the
failure is the candidate's own and is recorded as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from builder.candidates import Candidate
    from builder.tasks import Task


@dataclass
class InfrastructureFailure:
    """What a stream yields for a pair whose verification the machinery failed: no record, and no verdict."""

    candidate: Candidate
    task: Task
    reason: str
    # Pairs lost together (an engine process's or a Ray node engine's end) share one incident: the build counts it
    # once among the machinery's failures in a row, however many pairs that engine held.
    incident: str | None = None

    # The identity a stream's consumers key records by (engine processes, the orchestrator).
    @property
    def task_id(self) -> str:
        return self.task.id

    @property
    def kernel_id(self) -> str:
        return self.candidate.kernel_id

    @property
    def kernel_name(self) -> str:
        return self.candidate.kernel_name


# The control kernel's check (`preflight.confirm`): why it fails now, or None; given by whoever runs the engine, so
# that the engine's modules do not import the control kernel's, which runs the engine.
Confirm = Callable[[Any, float], "str | None"]


def machinery_fails(suspect: str, options: Any, since: float, confirm: Confirm | None) -> str | None:
    """The reason a suspected failure is the machinery's, where the control kernel, compiled afresh, fails too
    (`confirm`); None where it passes, or where there is no control to ask: the failure is the candidate's own."""
    if confirm is None:
        return None
    control = confirm(options, since)
    return None if control is None else f"{suspect} (and {control})"
