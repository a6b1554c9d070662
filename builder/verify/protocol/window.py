"""What crosses the sandbox boundary during a timing window (both sides import it).

The trusted parent referees the window (`referee.py`); the candidate's child serves it (`child/window.py`). They
talk through two FIFOs in the child's scratch folder, one JSON object per line:

    parent -> child                                       child -> parent
    {"warm": n}                                           {"warmed": n, "pair_ms": [...], "launch_ms": x}
    {"go": h, "kind": "candidate"|"eager",                {"done": h, "calls": [[m, ms, digest], ...]}
     "calls": [[m, seed], ...], "spin_ms": s}
    {"keep": [m, ...]}                                    {"kept": [m, ...]}  (outputs copied to the host)
    {"reveal": [m, ...]}                                  {"revealed": [m, ...]}  (files `timed{m}` written)
    {"end": true}                                         {"ended": true}
                                                          {"failed": "why", "kind": "candidate_error"|"lazy_output"}

After a candidate half-block, its sampled calls are kept (or revealed at once, where a window's samples are large);
the kept ones are revealed after the last half-block, once the parent has given the device back.

The parent's clock runs from its "go" to the child's "done": the child cannot start a half-block before it hears
the seeds of its calls, and cannot end it before it commits to every output by its digest. `digest` is SHA-256 over
an output's bytes (`output_digest.py`): the parent recomputes it from a revealed file bit for bit, and no other
output has it.
"""

from __future__ import annotations

import json
import os
import queue
import select
import time
from typing import Any

TO_CHILD, TO_PARENT = "window.to_child", "window.to_parent"  # FIFO names in the child's scratch folder
MAX_MESSAGE_BYTES = 1 << 20  # a longer line is a broken hand-shake, never parsed


class LinkClosed(Exception):
    """The other side went away, sent something unreadable, or said nothing within the time allowed."""


def digest(value: Any) -> list[str]:
    """One digest per output tensor (`output_digest.digest_tensor`): on the child's device, or the parent's host."""
    from builder.verify.protocol.compare import flatten_outputs
    from builder.verify.protocol.output_digest import digest_tensor

    return [digest_tensor(tensor) for tensor in flatten_outputs(value) or []]


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), allow_nan=False).encode() + b"\n"


class FifoLink:
    """One side of the window's two FIFOs. The parent opens both ends read-write (an open that never blocks and
    never sees EOF), the child its own direction only; reads wait with `select` so a silent peer ends the wait."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd
        self._buffer = b""

    @classmethod
    def make(cls, scratch: str | os.PathLike) -> None:
        """The parent creates the FIFOs before the child starts."""
        for name in (TO_CHILD, TO_PARENT):
            os.mkfifo(os.path.join(scratch, name), 0o600)

    @classmethod
    def parent_side(cls, scratch: str | os.PathLike) -> FifoLink:
        return cls(
            os.open(os.path.join(scratch, TO_PARENT), os.O_RDWR), os.open(os.path.join(scratch, TO_CHILD), os.O_RDWR)
        )

    @classmethod
    def child_side(cls, scratch: str | os.PathLike) -> FifoLink:
        read_fd = os.open(os.path.join(scratch, TO_CHILD), os.O_RDONLY)
        return cls(read_fd, os.open(os.path.join(scratch, TO_PARENT), os.O_WRONLY))

    def send(self, message: dict[str, Any]) -> None:
        data = encode(message)
        while data:
            data = data[os.write(self.write_fd, data) :]

    def receive(self, timeout_s: float | None = None, abort: Any = None) -> dict[str, Any]:
        """The next message; LinkClosed after `timeout_s`, once `abort` (an Event) is set, or on a bad line."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            if abort is not None and abort.is_set():
                raise LinkClosed("the child ended")
            wait = 0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic()))
            ready, _, _ = select.select([self.read_fd], [], [], wait)
            if ready:
                chunk = os.read(self.read_fd, 65536)
                if not chunk:
                    raise LinkClosed("the other side closed the window")
                self._buffer += chunk
                if len(self._buffer) > MAX_MESSAGE_BYTES and b"\n" not in self._buffer:
                    raise LinkClosed("a message longer than the hand-shake allows")
            elif deadline is not None and time.monotonic() >= deadline:
                raise LinkClosed(f"no word within {timeout_s:g} s")
        line, self._buffer = self._buffer.split(b"\n", 1)
        return parse(line)

    def close(self) -> None:
        for fd in {self.read_fd, self.write_fd}:
            try:
                os.close(fd)
            except OSError:
                pass


def parse(line: bytes) -> dict[str, Any]:
    if len(line) > MAX_MESSAGE_BYTES:
        raise LinkClosed("a message longer than the hand-shake allows")
    try:
        message = json.loads(line)
    except ValueError:
        raise LinkClosed("an unreadable message") from None
    if not isinstance(message, dict):
        raise LinkClosed("a message that is not an object")
    return message


class QueueLink:
    """An in-process link for trusted fakes in tests: the same messages through two queues."""

    def __init__(self, inbox: queue.Queue, outbox: queue.Queue) -> None:
        self.inbox, self.outbox = inbox, outbox

    @classmethod
    def pair(cls) -> tuple[QueueLink, QueueLink]:
        """(parent's end, child's end)."""
        to_child, to_parent = queue.Queue(), queue.Queue()
        return cls(to_parent, to_child), cls(to_child, to_parent)

    def send(self, message: dict[str, Any]) -> None:
        self.outbox.put(encode(message))

    def receive(self, timeout_s: float | None = None, abort: Any = None) -> dict[str, Any]:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if abort is not None and abort.is_set():
                raise LinkClosed("the child ended")
            wait = 0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic()))
            try:
                return parse(self.inbox.get(timeout=wait).rstrip(b"\n"))
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise LinkClosed(f"no word within {timeout_s:g} s") from None

    def close(self) -> None:
        pass
