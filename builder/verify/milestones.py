"""When a verifier's start reached each of its milestones: the throughput bench's view of where the seconds before
the first record go (an engine process's interpreter and imports, its zygote, its first clean reference begun and
ready, its first evaluation child, its first record). Times are `time.monotonic()`, one clock for every process of
the machine, so the bench lines up an engine's milestones with its own start. Only the first time of each milestone
is kept."""

from __future__ import annotations

import threading
import time

_marks: dict[str, float] = {}
_lock = threading.Lock()


def mark(name: str) -> None:
    """`name` was reached now, unless it was reached before."""
    with _lock:
        _marks.setdefault(name, time.monotonic())


def marks() -> dict[str, float]:
    with _lock:
        return dict(_marks)


def clear() -> None:
    """Forget every milestone: a process that runs several streams (the bench) clears them before each."""
    with _lock:
        _marks.clear()
