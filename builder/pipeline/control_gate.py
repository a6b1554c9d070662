"""The control kernel at the front of a build's first stream, and the outcomes held until it has passed.

A build does not wait for the control kernel (`preflight.StreamControl`) before its first candidates: the control
leads the first stream, so that it is built beside them. Until its own outcome comes, every other outcome (records
and the machinery's failures alike) is held in memory, not stored: where the control does not come out `correct`
the build stops with one line and nothing stored, as a failed preflight does. The control's record is judged by
its verdict alone (no baseline, no profile) and never stored; where a candidate of the build is the control kernel
itself (the same task and source), that pair waits for a later stream, so that no stream holds one key twice.
"""

from __future__ import annotations

from typing import Any

from builder.candidates import Candidate
from builder.errors import PREFLIGHT_FAILED, InfrastructureError
from builder.tasks import Task

Pair = tuple[Candidate, Task]


class ControlGate:
    def __init__(self, control: Any) -> None:
        self.control = control  # None: nothing to wait for (it passed here lately, or ran before the stream)
        self.sent = False
        self.held: list[Any] = []
        self.deferred: list[Pair] = []  # the build's own pair of the control kernel, for the next stream

    @property
    def open(self) -> bool:
        return self.control is None

    def lead(self, pairs: list[Pair]) -> tuple[Pair | None, list[Pair]]:
        """(the control's pair to stream before `pairs`, or None; the pairs to stream after it). The control goes
        with the first stream that has pairs; a build's own pair of it is `deferred` to the stream after."""
        if self.open or self.sent or not pairs:
            return None, pairs
        self.sent = True
        own = [(task.id, candidate.kernel_id) == self.control.key for candidate, task in pairs]
        self.deferred = [pair for pair, is_own in zip(pairs, own, strict=True) if is_own]
        rest = [pair for pair, is_own in zip(pairs, own, strict=True) if not is_own]
        return (self.control.candidate, self.control.task), rest

    def judges(self, outcome: Any) -> bool:
        """Whether `outcome` is the control's record, the one `release` judges."""
        return not self.open and getattr(outcome, "status", None) is not None and \
            (outcome.task_id, outcome.kernel_id) == self.control.key  # fmt: skip

    def release(self, outcome: Any) -> list[Any]:
        """The outcomes the build may take now: none while the control's is awaited; the held ones once it has
        passed (its own record is not the build's). InfrastructureError where it did not."""
        if self.open:
            return [outcome]
        if (outcome.task_id, outcome.kernel_id) != self.control.key:
            self.held.append(outcome)
            return []
        self.control.judge(outcome)
        self.control = None
        released, self.held = self.held, []
        return released

    def take_deferred(self) -> list[Pair]:
        deferred, self.deferred = self.deferred, []
        return deferred

    def stream_ended(self) -> None:
        """A stream that led with the control and ended without its outcome: nothing it held may be stored."""
        if self.sent and not self.open:
            raise InfrastructureError(f"{PREFLIGHT_FAILED}: the stream ended without the control kernel's outcome")
