"""The evaluation workers' queue (trusted parent side): bounded like `queue.Queue`, but a worker takes the oldest
item it can start now rather than the oldest item.

A candidate waits for its task's clean reference before its child runs. At a build's start every task's
reference is being computed (a few at a time), and a worker that took the queue's head in order would sit on
its task's reference while candidates of tasks already referenced waited behind it, with the device idle.
Which item runs first never changes a verdict: each candidate still gets a fresh child of its own and is
judged against its task's reference; only the order of the records changes, and they come in completion order
anyway.
"""

from __future__ import annotations

import enum
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from builder import config


class Readiness(enum.Enum):
    READY = "ready"  # starts without a wait
    PREPARING = "preparing"  # waits for what is under way elsewhere (its task's reference being computed)
    UNPREPARED = "unprepared"  # waits for what only the worker that takes it will start
    IN_ORDER = "in_order"  # taken only at the head, and nothing behind it is taken before it (END)


END = object()  # one per worker after the last item: the worker stops


class ReadyFirstQueue:
    """Items in arrival order; `get` takes the first one `readiness` calls READY, else the first UNPREPARED one
    (its worker prepares it), else waits until `notify` or `put` changes something."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = max(1, maxsize)
        self._items: deque[Any] = deque()
        self._changed = threading.Condition()

    def qsize(self) -> int:
        with self._changed:
            return len(self._items)

    def put(self, item: Any, timeout: float | None = None) -> None:
        """Append `item`, waiting for room up to `timeout` seconds (None: for ever); queue.Full after that."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while len(self._items) >= self.maxsize:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise queue.Full
                self._changed.wait(left)
            self._items.append(item)
            self._changed.notify_all()

    def put_nowait(self, item: Any) -> None:
        self.put(item, timeout=0)

    def get_nowait(self) -> Any:
        """The oldest item, whatever its readiness (queue.Empty when there is none)."""
        with self._changed:
            if not self._items:
                raise queue.Empty
            item = self._items.popleft()
            self._changed.notify_all()
            return item

    def clear(self) -> None:
        with self._changed:
            self._items.clear()
            self._changed.notify_all()

    def get(self, readiness: Callable[[Any], Readiness], recheck_s: float = 0.5) -> Any:
        """The item to start now. `recheck_s` bounds each wait: a readiness that changes without a `notify`
        (a reference dropped from its cache, say) is seen within it."""
        with self._changed:
            while True:
                index = self._choose(readiness)
                if index is not None:
                    item = self._items[index]
                    del self._items[index]
                    self._changed.notify_all()
                    return item
                self._changed.wait(recheck_s)

    def notify(self) -> None:
        """Something an item waited for is ready (or failed): workers look again."""
        with self._changed:
            self._changed.notify_all()

    def _choose(self, readiness: Callable[[Any], Readiness]) -> int | None:
        unprepared = None
        for index, item in enumerate(self._items):
            state = readiness(item)
            if state is Readiness.IN_ORDER:
                if index == 0:
                    return 0
                break  # nothing behind it goes first
            if state is Readiness.READY:
                return index
            if state is Readiness.UNPREPARED and unprepared is None:
                unprepared = index
        return unprepared


def evaluation_readiness(references: Any, options: Any) -> Callable[[Any], Readiness]:
    """`Verifier.stream`'s items, ((candidate, task), compile result) or END: a failed build needs no
    reference; any other waits for its task's (`ReferenceCache.readiness`). `options` are the worker's, fixed
    for the stream: they key the references with the task. With `options.take_ready_first` off, the queue's
    head goes first, whatever it waits for."""

    keys: dict[str, str] = {}  # task source -> reference key: a queue's scan asks for every item it holds

    ready_first = options.take_ready_first
    ready_first = config.EVAL_TAKE_READY_FIRST if ready_first is None else ready_first

    def readiness(item: Any) -> Readiness:
        if item is END or not ready_first:  # every item in order: the queue's head first
            return Readiness.IN_ORDER
        (_, task), compiled = item
        if not compiled.ok:
            return Readiness.READY
        if task.source not in keys:
            keys[task.source] = references.key(task, options)
        return references.readiness(keys[task.source])

    return readiness
