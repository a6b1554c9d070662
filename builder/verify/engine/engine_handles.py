"""The builder's handle on one engine process of a stream over several GPUs (`device_engines`, trusted side): how it
is started, told its options, sent messages, stopped and reaped; and how its `builder.*` log records reach the
builder's loggers."""

from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from multiprocessing.connection import Connection, Pipe
from typing import TYPE_CHECKING, Any

from builder import config
from builder.verify.protocol.entry_points import ENGINE_PROCESS_MODULE

if TYPE_CHECKING:
    from builder.candidates import Candidate
    from builder.tasks import Task
    from builder.verify.options import VerifyOptions

log = logging.getLogger(__name__)


class EngineHandle:
    """One engine process as the builder sees it: its process and connection (sent to under `send_lock`), the
    queue of its requests for pairs, and its load: what `EngineFleet` reads to hand out pairs.

    The load fields are read and written only under the fleet's `schedule` condition:

    - `pending`: sequence -> pair, from the moment a pair is handed out until its record comes back.
    - `ended`: its pending pairs were said (as records or crash records); nothing more is handed to it.
    - `done`: it ended by saying so: every record sent, its children stopped.
    - `told_end`: it was told there are no more pairs.
    - `flushed`: no pair sent since its last window's end (`hand_back.WINDOW_END`).
    - `handing_back`: asked to hand pairs back, not yet answered.
    - `refused_at`: its pending count when it last had none to hand back.
    - `asked_at`, `asking`, `has_asked`: its start, then its last request for a pair; whether a request of its
      waits for its answer; whether it ever asked."""

    def __init__(self, index: int, share: dict[str, Any], process: subprocess.Popen, connection: Connection) -> None:
        self.index, self.share = index, share
        self.process = process
        self.connection = connection
        self.send_lock = threading.Lock()
        self.requests: queue.Queue = queue.Queue()  # True per request for a pair; None once it has ended
        self.pending: dict[int, tuple[Candidate, Task]] = {}
        self.ended = False
        self.done = False
        self.told_end = False
        self.flushed = True
        self.handing_back = False
        self.refused_at: int | None = None
        self.asked_at = time.monotonic()
        self.asking = False
        self.has_asked = False

    @classmethod
    def spawn(cls, index: int, share: dict[str, Any]) -> EngineHandle:
        """Start the engine process of `share` (its GPU, cores and compile workers): it waits to be told `start`."""
        ours, theirs = Pipe(duplex=True)
        paths = [str(config.REPO_ROOT), os.environ.get("PYTHONPATH", "")]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
        if share["device"] is not None:
            env["CUDA_VISIBLE_DEVICES"] = share["device"]
        # A session of its own: a terminal's Ctrl-C reaches the builder alone, which stops its engines itself
        # (an engine that died first would turn its pending pairs into crash records while the build stops).
        process = subprocess.Popen([sys.executable, "-m", ENGINE_PROCESS_MODULE, str(theirs.fileno())], env=env,
                                   pass_fds=[theirs.fileno()], cwd=str(config.REPO_ROOT),
                                   start_new_session=True)  # fmt: skip
        theirs.close()
        if share["cores"]:
            try:  # before it is told to start: its engine keeps its timing cores from what it runs on
                os.sched_setaffinity(process.pid, share["cores"])
            except OSError as exc:  # it may already have gone: its reader sees the end
                log.debug("engine %d: cores not set: %s", index, exc)
        return cls(index, share, process, ours)

    def start(self, options: VerifyOptions, facts: dict[str, Any]) -> None:
        """Its options, log levels, and what this process read of the machine (`environment.known_facts`)."""
        options = replace(options, compile_workers=self.share["compile_workers"], device_index=0, engines=1)
        self.send(("start", options, builder_log_levels(), facts))

    def send(self, message: Any) -> None:
        """One message to the engine; OSError once its end of the connection is gone."""
        with self.send_lock:
            self.connection.send(message)

    def stop(self) -> None:
        """Ask a running engine to stop (SIGTERM: it closes its own stream, and its children die with it)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def reap(self) -> None:
        """Wait for the engine process to exit (killed after `ENGINE_STOP_GRACE_S`), then close its connection."""
        try:
            self.process.wait(timeout=config.ENGINE_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.connection.close()


def builder_log_levels() -> dict[str, int]:
    """The levels this process logs `builder.*` at (the package's effective level, and any set below it), for an
    engine to log at."""
    levels = {"builder": logging.getLogger("builder").getEffectiveLevel()}
    for name, logger in logging.root.manager.loggerDict.items():
        if name.startswith("builder.") and isinstance(logger, logging.Logger) and logger.level:
            levels[name] = logger.level
    return levels


def replay_log(fields: dict[str, Any], process_name: str) -> None:
    """An engine's log record, handled by this process's logger of the same name."""
    logger = logging.getLogger(str(fields.get("name", ENGINE_PROCESS_MODULE)))
    level = int(fields.get("levelno", logging.INFO))
    if logger.isEnabledFor(level):
        logger.handle(logging.makeLogRecord(dict(fields, processName=process_name)))
