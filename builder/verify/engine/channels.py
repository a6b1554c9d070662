"""The typed queues between a stream's stages (trusted parent side).

A `Channel` is closed by its producers: once each has closed it, every consumer's `receive` gets None after the
last item. The stream's `stop` event (the stream was closed, or a stage failed) ends every `send` and `receive`
at once, so no stage thread waits on a channel once the stream is over.
"""

from __future__ import annotations

import queue
import threading
from typing import Generic, TypeVar

T = TypeVar("T")

_END = object()  # one per consumer, once every producer has closed the channel
PUT_POLL_S = 0.5  # how often a thread waiting on a channel looks at the stream's stop


class Channel(queue.Queue, Generic[T]):
    """A queue of `T` from `producers` producer threads to `consumers` consumer threads."""

    def __init__(self, stop: threading.Event | None = None, producers: int = 1, consumers: int = 1,
                 maxsize: int = 0) -> None:  # fmt: skip
        super().__init__(maxsize)
        self.stop = stop if stop is not None else threading.Event()
        self.consumers = consumers
        self._open_producers = producers
        self._close_lock = threading.Lock()

    def send(self, item: T) -> bool:
        """Queue `item`, waiting for room; False (the item dropped) once the stream has stopped."""
        while not self.stop.is_set():
            try:
                self.put(item, timeout=PUT_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def receive(self) -> T | None:
        """The next item; None once the channel is closed and drained, or once the stream has stopped."""
        while not self.stop.is_set():
            try:
                item = self.get(timeout=PUT_POLL_S)
            except queue.Empty:
                continue
            return None if item is _END else item
        return None

    def close(self) -> None:
        """One producer is done; the last one's close ends the channel for every consumer."""
        with self._close_lock:
            self._open_producers -= 1
            last = self._open_producers == 0
        if last:
            for _ in range(self.consumers):
                self.send(_END)  # type: ignore[arg-type]

    @staticmethod
    def is_end(item: object) -> bool:
        return item is _END
