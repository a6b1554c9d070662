"""The end of a stream over several engines: an engine whose own pairs run out takes over pairs another engine has
not begun (trusted side; `device_engines` asks, `engine_process` answers).

Each engine keeps the tasks it took first (their clean references and baselines are made once), and the pairs are
all handed out long before the last records: engines read whole windows of builds ahead. Left at that, the engine
whose tasks cost more ends last, alone on the machine (7-17 s of a 100-200 s run, measured 2026-11-26).
So:

- Once the input is all handed out, an engine that asks for more is not told the end while another engine still
  holds pairs it has not begun: its request waits. It is first sent `WINDOW_END`, so the pairs it holds in a window
  not yet full are built and evaluated meanwhile (`read_window`).
- When its pending pairs fall to what its workers evaluate at once, the builder asks the busiest engine to hand
  back pairs no worker of its has taken (`UnstartedWork.take_back`): half its surplus, if that is at least
  `ENGINE_HAND_BACK_MIN_PAIRS`, of as few tasks as it can. Their builds are done: the taker's build of the same
  source is a cache hit in the shared build directory. Their tasks' clean references go with them where the giver
  has them (`ReferenceCache.share`): the taker moves a copy of the files into its own cache where its key is the
  same (the same GPU model, torch, seeds and tolerances) rather than run a reference child, seconds of it; its
  baselines are the giver's too, through the shared baseline directory.
- A pair is pending with exactly one engine at any time: the giver removes it from its queue before it says so,
  and the builder moves it to the taker only then. An engine that dies first leaves it a `crash` record, as any
  pending pair.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from builder import config
from builder.verify.engine.channels import Channel

WINDOW_END = object()  # in an engine's input: the window of builds being read ends here (more may follow)


def read_window(source: Iterator[Any], size: int, on_item: Callable[[Any], None] | None = None) -> list[Any] | None:
    """The next window of the stream's input: up to `size` items, fewer where `WINDOW_END` comes first (possibly
    none); None once the input is over. `on_item` sees each item as it is read, before the next is asked for: an
    engine's input comes a pair a request, and a window of them took 1.3-3.0 s to read on two H200s."""
    window: list[Any] = []
    for item in source:
        if item is WINDOW_END:
            return window
        if on_item is not None:
            on_item(item)
        window.append(item)
        if len(window) >= size:
            return window
    return window or None


class UnstartedWork(Channel):
    """The evaluation workers' channel of built pairs, from which pairs no worker has taken can be taken back."""

    def take_back(self, count: int, eligible: Callable[[Any], bool], group: Callable[[Any], Any]) -> list[Any]:
        """Remove and return up to `count` eligible items, those of the group with the most first (each task is one
        more reference and baseline for the taker to load, or to make where it cannot adopt them), the last queued
        first within a group. Under the queue's own lock: an item goes either to a worker or back, never both."""
        with self.mutex:
            groups: dict[Any, list[Any]] = {}
            for item in reversed(self.queue):
                if eligible(item):
                    groups.setdefault(group(item), []).append(item)
            taken = [item for members in sorted(groups.values(), key=len, reverse=True) for item in members][:count]
            gone = {id(item) for item in taken}  # by identity: copies of one pair compare equal
            kept = [item for item in self.queue if id(item) not in gone]
            self.queue.clear()
            self.queue.extend(kept)
            if taken:
                self.not_full.notify_all()  # builds waiting to be queued may go in now
        return taken


def hand_back_size(taker_pending: int, giver_pending: int, workers: int) -> int:
    """How many pairs an engine with `giver_pending` pending should hand to one with `taker_pending` (each with
    `workers` evaluation workers): none until the taker's pending fit in its workers; then half the giver's
    surplus over what its workers evaluate at once, or none below `ENGINE_HAND_BACK_MIN_PAIRS`."""
    if taker_pending > workers:
        return 0
    size = (giver_pending - workers) // 2
    return size if size >= config.ENGINE_HAND_BACK_MIN_PAIRS else 0


def worth_waiting(giver_pending: int, workers: int) -> bool:
    """Whether an engine holding `giver_pending` pairs might still hand some back: more than its workers evaluate
    at once plus a hand-back's least."""
    return giver_pending - workers >= 2 * config.ENGINE_HAND_BACK_MIN_PAIRS
