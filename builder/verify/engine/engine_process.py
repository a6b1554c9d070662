"""An engine process (`device_engines`): a `Verifier` over one GPU, run as `python -m builder.verify.engine.engine_process
FD` by the builder's process, which it asks for pairs and sends records (and its `builder.*` log records) over the
connection FD. Trusted, like the builder: candidate code runs only in its sandboxed children."""

from __future__ import annotations

import json
import logging
import os
import pickle
import queue
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, replace
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from builder import config

if TYPE_CHECKING:
    from builder.candidates import Candidate
    from builder.tasks import Task
    from builder.verify.engine.verifier import Verifier


class _ForwardLogs(logging.Handler):
    """In an engine: its `builder.*` records, sent to the builder's process (what it needs to show them)."""

    def __init__(self, send: Any) -> None:
        super().__init__()
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            exc_text = logging.Formatter().formatException(record.exc_info) if record.exc_info else None
            fields = {"name": record.name, "levelno": record.levelno, "levelname": record.levelname,
                      "msg": record.getMessage(), "exc_text": exc_text, "created": record.created}  # fmt: skip
            self._send(("log", fields))
        except (OSError, ValueError):  # the builder has gone, or the pipe is closed: the record goes nowhere
            pass


def _import_torch() -> None:
    from builder.verify import milestones

    try:
        import torch  # noqa: F401
    except ImportError:  # said where it is needed
        return
    milestones.mark("torch_imported")


def engine_totals(verifier: Verifier, started_at: float, records: int, last_record_at: float | None = None,
                  stopped: bool = False) -> dict[str, Any]:  # fmt: skip
    """What an engine's stream did beside its records, for the throughput bench: its device's time (`GateStats`),
    its clean references and baseline children, and when it started, each reference was ready and its last record
    went out (time.monotonic(), one clock for every process of the machine). `stopped`: before its stream's end,
    its records counted as far as it got (the one it was sending as it was stopped perhaps not)."""
    from builder.verify import milestones
    from builder.verify.engine.device_gate import device_gate

    gate = device_gate(verifier.options.backend, 0).snapshot()
    return {"records": records, "started_at": started_at, "last_record_at": last_record_at, "stopped": stopped,
            "milestones": milestones.marks(), "gate": asdict(gate),
            "references": verifier.references.computed, "reference_s": verifier.references.compute_s,
            "references_adopted": verifier.references.adopted,
            "disk_room_waits": verifier.references.room.waits, "disk_room_waited_s": verifier.references.room.waited_s,
            "reference_ready_at": list(verifier.references.ready_at),
            "baseline_children_s": list(verifier.baselines.children_s)}  # fmt: skip


class Engine:
    """An engine's side of its connection to the builder: the pairs it is handed, fed to its `Verifier`'s stream,
    and the records sent back, each with the sequence its pair came with.

    Three threads share it: the stream's reader (`pairs`), the one thread that receives (`receive`, which also
    answers requests to hand pairs back), and the one that sends the records (`run`); log records are sent from any
    thread (`forward_logs`). What they share, and what guards it:

    - `connection`: sent to under `_send_lock` (whole messages, never interleaved); received from by `receive`
      alone once `run` starts.
    - `_sequences`: (task id, kernel id, kernel name) -> the sequences of that pair's copies not yet recorded or
      handed back, in the order they came; under `_sequences_lock`.
    - `answers`: a queue of the builder's answers to requests for pairs (a pair, a window's end, or None).
    - `verifier`: set before `run`, then only read.
    """

    def __init__(self, connection: Connection, verifier: Verifier | None = None) -> None:
        self.connection = connection
        self.verifier = verifier
        self.answers: queue.Queue = queue.Queue()
        self._send_lock = threading.Lock()
        self._sequences: dict[tuple[str, str, str], deque[int]] = {}
        self._sequences_lock = threading.Lock()

    def send(self, message: Any) -> None:
        with self._send_lock:
            self.connection.send(message)

    def forward_logs(self, levels: dict[str, int]) -> None:
        """Log `builder.*` at the builder's levels, and send each record to the builder, which shows it."""
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        builder_log = logging.getLogger("builder")
        builder_log.addHandler(_ForwardLogs(self.send))
        builder_log.propagate = False  # shown by the builder's process, not also on this one's stderr

    def pairs(self) -> Iterator[tuple[Candidate, Task] | object]:
        """The stream's input: one pair per request, or the end of a window (`hand_back.WINDOW_END`)."""
        from builder.verify import milestones
        from builder.verify.engine.hand_back import WINDOW_END

        while True:
            milestones.mark("first_pair_asked")  # these two part an answer's wait from the window's reading
            self.send(("next",))
            item = self.answers.get()
            milestones.mark("first_pair_received")
            if item is None:
                return
            if item == "window_end":
                yield WINDOW_END
                continue
            sequence, candidate, task, offer = item
            with self._sequences_lock:
                self._sequences.setdefault(_key(candidate), deque()).append(sequence)
            if offer is not None:  # the task's reference, shared by the engine that handed its pairs back
                self.verifier.references.adopt(task, self.verifier.options, offer)
            yield candidate, task

    def hand_back(self, count: int) -> None:
        """Pairs no worker has begun, removed from this stream and said to the builder by their sequences (every
        pair came through `pairs`, so each has one; one without would stay pending and end as a crash record),
        with their tasks' clean references where this engine has them (`ReferenceCache.share`), by task id."""
        returned, tasks = [], {}
        for candidate, task in self.verifier.hand_back(count):
            with self._sequences_lock:
                waiting = self._sequences.get(_key(candidate))
                sequence = waiting.pop() if waiting else None
            if sequence is not None:
                returned.append(sequence)
                tasks[task.id] = task
        options = self.verifier.options
        offers = {task_id: self.verifier.references.share(task, options) for task_id, task in tasks.items()}
        self.send(("handed_back", returned, {task_id: offer for task_id, offer in offers.items() if offer}))

    def receive(self) -> None:
        """Every message from the builder after "start" (only this thread receives): answers for the stream's
        input, and requests to hand back pairs, answered at once whatever the stream is doing."""
        try:
            while True:
                item = self.connection.recv()
                if isinstance(item, tuple) and item and item[0] == "hand_back":
                    self.hand_back(int(item[1]))
                else:
                    self.answers.put(item)
        except (EOFError, OSError, pickle.UnpicklingError):
            # the builder has gone (mid-message, perhaps): the input ends, and the engine with it
            self.answers.put(None)

    def sequence_of(self, record: Any) -> int:
        """The sequence a record goes back with: that of the first of its pair's copies still waiting."""
        with self._sequences_lock:
            return self._sequences[_key(record)].popleft()

    def run(self, started_at: float) -> int:
        """Verify what the builder hands out until it says there is no more, sending each record; then say done.
        Its exit status: 0, or 1 where the stream raised (said to the builder, which raises it in the build)."""
        threading.Thread(target=self.receive, daemon=True, name="ka-engine-receive").start()
        records, made, last_record_at = self.verifier.stream(self.pairs()), 0, None
        ended = False
        try:
            for record in records:
                self.send(("record", self.sequence_of(record), record))
                made, last_record_at = made + 1, time.monotonic()
            ended = True
            _log_totals(self.verifier, started_at, made, last_record_at)
            self.send(("done",))
            return 0
        except Exception as exc:  # noqa: BLE001 - said to the parent, which raises it in the build
            ended = True
            self.send(("error", f"{type(exc).__name__}: {exc}"))
            self.send(("done",))
            return 1
        finally:
            records.close()  # stops its builds and children (SIGTERM lands here through SystemExit)
            if not ended:  # stopped (a build or a bench cut short): its figures so far, while the parent still reads
                _log_totals(self.verifier, started_at, made, last_record_at, stopped=True)


def _engine_main(connection: Connection) -> int:
    started_at = time.monotonic()
    kind, options, levels, facts = connection.recv()
    if kind != "start":
        return 2
    from builder.verify import environment, milestones

    milestones.mark("start_received")

    environment.adopt(facts)
    # The judge reads outputs through torch: loaded while the first clean references compute, not after them.
    threading.Thread(target=_import_torch, daemon=True, name="ka-import-torch").start()
    engine = Engine(connection)
    engine.forward_logs(levels)

    from builder.verify.engine.verifier import Verifier

    engine.verifier = Verifier(replace(options, engines=1))  # in its own process: an engine never starts engines
    milestones.mark("verifier_ready")
    return engine.run(started_at)


def _log_totals(verifier: Verifier, started_at: float, made: int, last_record_at: float | None,
                stopped: bool = False) -> None:  # fmt: skip
    log = logging.getLogger("builder.verify.engine.verifier")  # the engine's logger: where the bench listens
    if not log.isEnabledFor(logging.DEBUG):
        return
    try:
        totals = engine_totals(verifier, started_at, made, last_record_at, stopped)
        log.debug("engine totals: %s", json.dumps(totals))
    except Exception as exc:  # noqa: BLE001 - figures for a bench: never the stream's failure
        log.debug("engine totals unavailable: %s", exc)


def _key(kernel: Any) -> tuple[str, str, str]:
    """Which pair a candidate, or its record, is of (copies of one pair share it: any of their sequences will do)."""
    return kernel.task_id, kernel.kernel_id, kernel.kernel_name


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _exit_with_parent(parent: int) -> None:
    """The engine outlives no builder: once its parent is gone, it stops as on SIGTERM."""
    while os.getppid() == parent:
        threading.Event().wait(config.ENGINE_PARENT_POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or not args[0].isdigit():
        print(f"usage: python -m {__name__} FD (started by the verify engine)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    try:
        return _engine_main(Connection(int(args[0])))
    except (EOFError, OSError, pickle.UnpicklingError):
        return 1  # the parent went away mid-message


if __name__ == "__main__":
    sys.exit(main())
