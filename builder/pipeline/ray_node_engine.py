"""The engine of one Ray node (trusted side): the local executor's `Verifier` inside a Ray actor, fed by the build.

The build (Ray's driver) starts one `NodeEngine` actor per node that can evaluate, holding the GPUs Ray assigns it
there (Ray sets its CUDA_VISIBLE_DEVICES): its `Verifier` runs an engine process per GPU, a compile pool on the
node's cores, pre-started sandboxed children and shared references and baselines, as a local build does. Candidate
code still runs only in the engine's sandboxed children.

A stream is a `begin`, then `exchange` calls until one says the stream is over. Each exchange hands the node more
pairs (and, once, the end of its input) and returns the records made since the last one. The engine's stream reads
pairs from an inbox, so it pulls them as its compile windows want them; the build keeps that inbox a few pairs
deep (`refill_below`), so no node claims more than it will start on soon and the nodes share the work.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

from builder.errors import InfrastructureError

_END = object()  # in the inbox: the stream's input is over


class NodeEngine:
    """A Ray actor's body (`ray.remote(...)(NodeEngine)` in `ray_executor`); `make_verifier(options, settings)` is
    the local executor's factory, the real engine's `Verifier` unless a test passes a stand-in."""

    def __init__(self, make_verifier: Any, options: Any, settings: Any) -> None:
        self.verifier = make_verifier(options, settings)
        self.inbox: queue.Queue = queue.Queue()
        self.outbox: queue.Queue = queue.Queue()
        self.worker: threading.Thread | None = None
        self.finished = threading.Event()
        self.failed: str | None = None

    def preflight(self) -> str | None:
        """Why the engine's control kernel fails on this node, or None (also for a stand-in without one)."""
        check = getattr(self.verifier, "preflight", None)
        if not callable(check):
            return None
        try:
            check()
        except InfrastructureError as exc:
            return str(exc)
        return None

    def begin(self) -> None:
        """Start a stream over whatever `exchange` hands in (the last stream must have ended)."""
        if self.worker is not None and self.worker.is_alive():
            raise RuntimeError("a node engine's stream began before its last one ended")
        self.inbox, self.outbox = queue.Queue(), queue.Queue()
        self.finished.clear()
        self.failed = None
        self.worker = threading.Thread(target=self._run, daemon=True, name="ka-node-engine")
        self.worker.start()

    def exchange(self, pairs: list, end: bool, refill_below: int, wait_s: float) -> tuple[list, int, bool, str | None]:
        """Queue `pairs` (and the input's end), then wait up to `wait_s` for a record, for the inbox to fall below
        `refill_below`, or for the stream's end. Returns (records and crash records, pairs still queued, whether
        the stream is over, why the engine failed or None)."""
        for pair in pairs:
            self.inbox.put(pair)
        if end:
            self.inbox.put(_END)
        deadline = time.monotonic() + wait_s
        while (self.outbox.empty() and not self.finished.is_set() and self.inbox.qsize() >= refill_below
               and time.monotonic() < deadline):  # fmt: skip
            self.finished.wait(0.01)
        items = []
        while True:
            try:
                items.append(self.outbox.get_nowait())
            except queue.Empty:
                break
        over = self.finished.is_set() and self.outbox.empty()
        return items, self.inbox.qsize(), over, self.failed if over else None

    def _pairs(self) -> Iterator[tuple[Any, Any]]:
        while (pair := self.inbox.get()) is not _END:
            yield pair

    def _run(self) -> None:
        try:
            for item in self.verifier.stream(self._pairs()):
                self.outbox.put(item)
        except Exception as exc:  # the engine's own failure: the build gets its pairs back, no record
            self.failed = f"{type(exc).__name__}: {exc}"
        finally:
            self.finished.set()
