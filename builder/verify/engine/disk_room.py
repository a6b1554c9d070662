"""Room on the disk that holds the parent's scratch (trusted parent side).

The clean references' files and every evaluation child's outputs (its checks', its timing sets', its revealed
timed calls) live on one disk, the parent's temp directory. A child that finds it full fails "No space left on
device" in the middle of its candidate's checks, and that failure says nothing about the candidate. So a child
starts only where the disk has room for what it will write (`reserved`), counting what the children already
started may still write; the references are held to a share of the disk by their cache (`ReferenceCache`).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from builder import config


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


class DiskRoom:
    """The bytes on `path`'s disk that this stream's children may still write: `share` of its free space above
    `floor_bytes` (an engine among N on one machine has a Nth), less what the children started here reserved."""

    def __init__(self, path: Path, share: float = 1.0, floor_bytes: int = config.DISK_FLOOR_BYTES) -> None:
        self.path, self.share, self.floor_bytes = Path(path), max(min(share, 1.0), 0.0), floor_bytes
        self._reserved = 0
        self._changed = threading.Condition()
        self.waits = 0  # children that waited for room, and how long in all (the bench's figures, engine totals)
        self.waited_s = 0.0

    def room(self) -> int:
        """The bytes a child may reserve now."""
        with self._changed:
            return self._room()

    def _room(self) -> int:
        return int((free_bytes(self.path) - self.floor_bytes) * self.share) - self._reserved

    @contextmanager
    def reserved(self, nbytes: int) -> Iterator[None]:
        """Hold `nbytes` of room while the block runs, waiting for it first. The reserved bytes count as written
        from the start, though a child writes its files as it goes: a child never finds the disk full, at the
        cost of some waiting on a small one. A child that would wait with none reserved here starts anyway: a
        disk too small for one task's outputs fails the same with or without the wait, and a stream that stops
        kills its children, whose reservations end with them."""
        nbytes = max(int(nbytes), 0)
        began = time.monotonic()
        with self._changed:
            while nbytes and self._reserved and nbytes > self._room():
                self._changed.wait(config.DISK_ROOM_POLL_S)  # others' space freed is seen at the next look
            self._reserved += nbytes
        if (waited := time.monotonic() - began) > config.DISK_ROOM_POLL_S / 2:
            self.waits += 1
            self.waited_s += waited
        try:
            yield
        finally:
            with self._changed:
                self._reserved -= nbytes
                self._changed.notify_all()
