"""The control kernel at the front of a build's first stream, and the outcomes held until it has passed.

A build does not wait for the control kernel (`preflight.StreamControl`) before its first candidates: the control
leads the first stream, so that it is built beside them. Until its own outcome comes, every other outcome (records
and the machinery's failures alike) is held in memory, not stored: where the control does not come out `correct`
the build stops with one line and nothing stored, as a failed preflight does. Where a candidate of the build is the
control kernel itself (the same task and source), that pair leads instead, and its record is kept.
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
        self.ours = True  # whether the leading pair is the control's own, whose record is not the build's
        self.held: list[Any] = []

    @property
    def open(self) -> bool:
        return self.control is None

    def lead(self, pairs: list[Pair]) -> tuple[Pair | None, list[Pair]]:
        """(the control's pair to stream before `pairs`, or None; `pairs` in the order to stream them). The
        control goes with the first stream that has pairs; a build's own pair of it goes first instead."""
        if self.open or self.sent or not pairs:
            return None, pairs
        self.sent = True
        own = [pair for pair in pairs if (pair[1].id, pair[0].kernel_id) == self.control.key]
        self.ours = not own
        if own:
            return None, [own[0], *(pair for pair in pairs if pair is not own[0])]
        return (self.control.candidate, self.control.task), pairs

    def release(self, outcome: Any) -> list[Any]:
        """The outcomes the build may take now: none while the control's is awaited; the held ones, and this one
        unless it is the control's own, once the control has passed. InfrastructureError where it did not."""
        if self.open:
            return [outcome]
        if (outcome.task_id, outcome.kernel_id) != self.control.key:
            self.held.append(outcome)
            return []
        self.control.judge(outcome)
        self.control = None
        released, self.held = self.held, []
        return released if self.ours else [*released, outcome]

    def stream_ended(self) -> None:
        """A stream that led with the control and ended without its outcome: nothing it held may be stored."""
        if self.sent and not self.open:
            raise InfrastructureError(f"{PREFLIGHT_FAILED}: the stream ended without the control kernel's outcome")
