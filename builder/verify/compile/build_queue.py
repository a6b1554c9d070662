"""One queue of builds on one executor, lowest rank first (trusted parent side; `batching.compile_many`)."""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

Ended = Callable[[BaseException | None], None]


class BuildQueue:
    """The builds of a stream's windows of candidates in one queue on one executor: each turn a worker gets runs
    the first build waiting by then. Earlier windows rank first, so the next window's builds fill the workers
    only while the last one's stragglers (a long build, a failed build's rebuilds) hold some of them, rather
    than waiting for its last build to end."""

    def __init__(self, executor: Executor | None = None) -> None:
        self.executor = executor
        self._lock = threading.Lock()
        self._waiting: list[tuple[tuple[int, ...], int, Callable[[Any], None], Any, Ended]] = []
        self._arrival = itertools.count()

    def submit(self, rank: tuple[int, ...], fn: Callable[[Any], None], arg: Any, ended: Ended) -> None:
        """Queue `fn(arg)` at `rank` (lowest first, then arrival) and hand the executor one turn; `ended(error)`
        follows the build. RuntimeError when the executor was shut down: nothing is queued then."""
        with self._lock:
            order = next(self._arrival)
            heapq.heappush(self._waiting, (rank, order, fn, arg, ended))
        if self.executor is None:
            self._run_first()
            return
        try:
            self.executor.submit(self._run_first)
        except RuntimeError:
            with self._lock:  # no turn will run it: a turn already given must not take it in another's place
                self._waiting = [item for item in self._waiting if item[1] != order]
                heapq.heapify(self._waiting)
            raise

    def _run_first(self) -> None:
        with self._lock:
            _, _, fn, arg, ended = heapq.heappop(self._waiting)  # one turn per queued build: never empty here
        error: BaseException | None = None
        try:
            fn(arg)
        except BaseException as exc:  # noqa: BLE001 - handed to the build's owner
            error = exc
        finally:
            ended(error)
