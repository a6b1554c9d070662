"""Which engine gets which pair of a stream over several engines (`device_engines`, trusted side).

- An engine asks for its next pair when its stream wants one. It gets the first waiting pair, in the input's
  order, of a task it already has, or of a task nobody has yet while it has no more tasks than any other engine
  (a task's clean reference and baselines are then made once, and the tasks split evenly); else the first
  waiting pair of a task nobody has; else the first waiting pair, whose task it then shares: no engine idles
  while pairs wait. Input order, not its own tasks first: an engine that took its tasks' pairs ahead of the rest
  worked through one task at a time, all its workers waiting on that task's reference at the start and its
  slowest tasks' copies timed one after another at the end (measured 2026-11-26).
- An engine more than a shared build's worth of pairs (`batch_size`) ahead of the least loaded other engine
  waits: an engine reads its stream a window of builds at a time, and the first up would otherwise take a short
  stream whole. Once the input is all read, the last pairs go to the least loaded: engines read far ahead of
  what they evaluate, so the pairs are all handed out long before the last records, and an engine a build ahead
  at that moment evaluated a build's worth of kernels alone at the end.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from builder import config

if TYPE_CHECKING:
    from builder.candidates import Candidate
    from builder.tasks import Task


class Router:
    """The pairs waiting to be handed out, read ahead from the stream's input, and which engine has which task.
    Thread-safe: each engine's reader thread asks for that engine's next pair."""

    def __init__(self, pairs: Iterable[tuple[Candidate, Task]], lookahead: int, engines: int = 1) -> None:
        self._source = iter(pairs)
        self._waiting: deque[tuple[Candidate, Task]] = deque()
        self._lookahead = max(1, lookahead)
        self._engines = max(1, engines)
        self._owner: dict[str, int] = {}  # task id -> the engine that took its first pair
        self._taken: dict[int, set[str]] = {}  # engine -> the tasks it has had pairs of (its own, and any shared)
        self._lock = threading.Lock()
        self._exhausted = False
        # Pairs `next_for` returned that are not yet pending with an engine: while one is, an engine that finds
        # nothing waiting is not told the end, since the pair comes back here if its engine has ended meanwhile.
        self._in_transit = 0
        self._returned: set[int] = set()  # id() of waiting pairs given back: each was handed out before

    def next_for(self, engine: int) -> tuple[Candidate, Task] | None:
        """The next pair for `engine`, or None once every pair is handed out."""
        with self._lock:
            while not self._exhausted and len(self._waiting) < self._lookahead:
                try:
                    self._waiting.append(next(self._source))
                except StopIteration:
                    self._exhausted = True
            if not self._waiting:
                return None
            chosen = self._choose(engine)
            pair = self._waiting[chosen]
            del self._waiting[chosen]
            self._owner.setdefault(pair[1].id, engine)
            self._taken.setdefault(engine, set()).add(pair[1].id)
            self._in_transit += 1
            self._returned.discard(id(pair))
            return pair

    def delivered(self) -> None:
        """A pair `next_for` returned is pending with its engine now."""
        with self._lock:
            self._in_transit = max(0, self._in_transit - 1)

    def give_back(self, pair: tuple[Candidate, Task], *, undelivered: bool = False) -> None:
        """A pair an engine handed back unbegun, or (`undelivered`) one `next_for` returned for an engine that
        ended before it took it: first in line again."""
        with self._lock:
            if undelivered:
                self._in_transit = max(0, self._in_transit - 1)
            self._waiting.appendleft(pair)
            self._returned.add(id(pair))

    def take_returned(self) -> list[tuple[Candidate, Task]]:
        """The waiting pairs that were given back, taken out (at a stream's end, where no engine is left)."""
        with self._lock:
            taken = [pair for pair in self._waiting if id(pair) in self._returned]
            self._waiting = deque(pair for pair in self._waiting if id(pair) not in self._returned)
            self._returned.clear()
            return taken

    def in_transit(self) -> bool:
        """Whether a pair is on its way to an engine that may yet give it back."""
        with self._lock:
            return self._in_transit > 0

    def all_read(self) -> bool:
        """Whether the input is read to its end (the waiting pairs are the stream's last)."""
        with self._lock:
            return self._exhausted

    def drained(self) -> bool:
        """Whether every pair is handed out (known without reading further)."""
        with self._lock:
            return self._exhausted and not self._waiting

    def unfinished(self) -> bool:
        """Whether pairs are still waiting or unread (none is read beyond the first)."""
        with self._lock:
            if not self._waiting and not self._exhausted:
                try:
                    self._waiting.append(next(self._source))
                except StopIteration:
                    self._exhausted = True
            return bool(self._waiting)

    def _choose(self, engine: int) -> int:
        mine = self._taken.get(engine, set())
        owned = Counter(self._owner.values())
        may_claim = all(owned[engine] <= owned[other] for other in range(self._engines) if other != engine)
        unowned = None
        for index, (_, task) in enumerate(self._waiting):
            if task.id in mine:
                return index
            if task.id not in self._owner:
                if may_claim:
                    return index
                unowned = index if unowned is None else unowned
        return unowned if unowned is not None else 0


def within_reach(pending: int, others: list[int], slack: int) -> bool:
    """Whether an engine holding `pending` pairs may take one more beside engines holding `others`: not while it
    is more than `slack` ahead of the least loaded."""
    return not others or pending <= min(others) + slack


def balanced(engine: Any, engines: list[Any], last_pairs: bool, slack: int, now: float) -> bool:
    """Whether `engine` may take a pair beside `engines` (each with its `pending` pairs, `ended`, `told_end`,
    `asking`, `has_asked` and `asked_at`): not while it is more than `slack` ahead of the least loaded of those
    still asking, or starting (one that has not asked for `ENGINE_BALANCE_WAIT_S` holds nobody back).

    Once the input is all read (`last_pairs`), without slack, against those starting or reading now (asking, or
    answered within `ENGINE_READING_S`): the last pairs go to the least loaded of the engines that want them, and
    none waits long for one that does not (its window read, it waits for room for the next). Not only those asking
    at that moment: two engines reading side by side ask in turn, and the last pairs of a 96-kernel stream went
    53 to 43 (measured)."""

    def holds_back(e: Any) -> bool:
        if not last_pairs or not e.has_asked:  # one starting holds the others back as long as ever
            return now - e.asked_at < config.ENGINE_BALANCE_WAIT_S
        return e.asking or now - e.asked_at < config.ENGINE_READING_S

    others = [len(e.pending) for e in engines if e is not engine and not e.ended and not e.told_end and holds_back(e)]
    return within_reach(len(engine.pending), others, 0 if last_pairs else slack)
