"""One engine process per GPU: `Verifier.stream` over several GPUs (trusted side, like the parent).

One process that watches, judges and grants device turns for the children of every GPU is bound by its one
interpreter lock: on two H200s a single parent spent 1.9 cores of Python on 1.4 kernels/s and the second GPU
added 17 %. So a stream over N GPUs runs N engine processes (`engine_process.py`),
each a `Verifier` over one GPU (its CUDA_VISIBLE_DEVICES) on its own share of the cores, with its share of the
compile workers and the build's seeds. This process only hands out pairs and gathers records:

- An engine asks for its next pair when its stream wants one; `routing` says which pair, and when. At the
  stream's end an engine with nothing left takes over pairs another has not begun (`hand_back`), and a copy of
  the clean references of their tasks, which the giver shares (`ReferenceCache.share`) and this process passes on.
- A pair is pending from the moment it is handed out until its record comes back. An engine that dies sends
  each of its pending pairs back as an `InfrastructureFailure` (an engine runs no candidate code: its death is
  the machinery's, and the build tries the pair again): none lost, none twice; the other engines go on. Should every engine end early, the stream raises: the pairs none of them
  began get no record, and a rerun of the build resumes them.
- The stream ends once every engine has said it is done (its records sent, its children stopped); their
  processes' exits are reaped meanwhile. Closing the stream before then stops every engine (SIGTERM: each closes
  its own stream, and its children die with it).
- An engine's `builder.*` log records come to this process's loggers, at the levels set here when the stream
  began (`processName` says which engine): a caller's handlers see them as they would an in-process engine's.
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder import config
from builder.verify import environment, milestones
from builder.verify.engine import hand_back
from builder.verify.engine.infrastructure import InfrastructureFailure
from builder.verify.engine.routing import Router, balanced
from builder.verify.protocol.entry_points import ENGINE_PROCESS_MODULE

if TYPE_CHECKING:
    from builder.candidates import Candidate
    from builder.tasks import Task
    from builder.verify.engine.clean_reference import SharedReference
    from builder.verify.options import VerifyOptions
    from schemas import KernelRecord

log = logging.getLogger(__name__)


def engine_devices(options: VerifyOptions) -> list[str | None]:
    """The GPU of each engine process a stream runs (None for a CPU engine), or [] to verify in the caller's
    process: one engine per visible GPU where several are visible (`config.ENGINE_PROCESS_PER_GPU`, or
    `options.engines` > 1); on the CPU backend only where `options.engines` asks for several."""
    wanted = options.engines
    if options.backend != "cuda":
        return [None] * wanted if wanted and wanted > 1 else []
    visible = environment.visible_gpu_ids()
    on = config.ENGINE_PROCESS_PER_GPU if wanted is None else wanted > 1
    return list(visible) if on and len(visible) > 1 else []


def engine_shares(devices: list[str | None], cores: list[int], compile_workers: int) -> list[dict[str, Any]]:
    """Each engine's GPU, cores (a contiguous slice each) and compile workers (an even share, at least one).

    Slices, not one pool of the cores that no engine keeps for its windows: with a pool, two engines' starts
    (each engine's torch.compile baselines spreading over every core it may use, its references and its first
    children) starved the first evaluations' children, and after the start two GPUs made 1.79x one GPU's rate
    against 1.83x with slices (docs/gpu-runs.md, 2026-11-26)."""
    count = len(devices)
    per_engine = len(cores) // count
    shares = []
    for index, device in enumerate(devices):
        mine = cores[index * per_engine : (index + 1) * per_engine] if per_engine else cores
        shares.append({"device": device, "cores": mine, "compile_workers": max(1, compile_workers // count)})
    return shares


class _Engine:
    """The parent's handle on one engine process: its connection, its pending pairs and its two threads (one
    passes its records on, one answers its requests for pairs: a slow input never holds records up)."""

    def __init__(self, index: int, share: dict[str, Any]) -> None:
        self.index, self.share = index, share
        self.pending: dict[int, tuple[Candidate, Task]] = {}
        self.pending_lock = threading.Lock()
        self.ended = False  # set, under pending_lock, once its pending pairs were said
        self.done = False  # it ended by saying so: every record sent, its children stopped
        self.told_end = False  # it was told there are no more pairs
        self.flushed = True  # no pair sent since its last window's end (`hand_back.WINDOW_END`)
        self.handing_back = False  # asked to hand pairs back, not yet answered
        self.refused_at: int | None = None  # its pending count when it last had none to hand back
        self.asked_at = time.monotonic()  # its start, then its last request for a pair
        self.asking = False  # a request of its waits for its answer
        self.has_asked = False
        self.requests: queue.Queue = queue.Queue()
        self.send_lock = threading.Lock()
        ours, theirs = Pipe(duplex=True)
        paths = [str(config.REPO_ROOT), os.environ.get("PYTHONPATH", "")]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
        if share["device"] is not None:
            env["CUDA_VISIBLE_DEVICES"] = share["device"]
        # A session of its own: a terminal's Ctrl-C reaches the builder alone, which stops its engines itself
        # (an engine that died first would turn its pending pairs into crash records while the build stops).
        self.process = subprocess.Popen([sys.executable, "-m", ENGINE_PROCESS_MODULE, str(theirs.fileno())], env=env,
                                        pass_fds=[theirs.fileno()], cwd=str(config.REPO_ROOT),
                                        start_new_session=True)  # fmt: skip
        theirs.close()
        self.connection: Connection = ours
        if share["cores"]:
            try:  # before it is told to start: its engine keeps its timing cores from what it runs on
                os.sched_setaffinity(self.process.pid, share["cores"])
            except OSError as exc:  # it may already have gone: its reader sees the end
                log.debug("engine %d: cores not set: %s", index, exc)

    def start(self, options: VerifyOptions, facts: dict[str, Any]) -> None:
        """Its options, log levels, and what this process read of the machine (`environment.known_facts`)."""
        options = replace(options, compile_workers=self.share["compile_workers"], device_index=0, engines=1)
        self.send(("start", options, builder_log_levels(), facts))

    def send(self, message: Any) -> None:
        with self.send_lock:
            self.connection.send(message)


def stream(options: VerifyOptions, pairs: Iterable[tuple[Candidate, Task]], devices: list[str | None],
           cores: list[int]) -> Iterator[KernelRecord]:  # fmt: skip
    """Records of `pairs` verified by one engine process per entry of `devices`, in completion order."""
    shares = engine_shares(devices, cores, options.compile_workers)
    window = max(1, options.batch_size) * max(1, shares[0]["compile_workers"])
    router = Router(pairs, lookahead=window * len(devices), engines=len(devices))
    records: queue.Queue = queue.Queue()
    sequences = iter(range(1 << 62))
    engines: list[_Engine] = []
    balance = threading.Condition()  # notified whenever an engine's pending pairs change or it ends
    slack = max(1, options.batch_size)  # while input is left to read; none for its last pairs
    workers = options.workers_per_device()  # each engine's: it has one device
    offers: dict[str, SharedReference] = {}  # task id -> the clean reference shared with its handed-back pairs
    shared_directories: list[str] = []
    offers_lock = threading.Lock()

    def may_take(engine: _Engine) -> bool:
        return router.drained() or balanced(engine, engines, router.all_read(), slack, time.monotonic())

    def changed() -> None:
        with balance:
            balance.notify_all()

    def crash(pair: tuple[Candidate, Task], why: str) -> InfrastructureFailure:
        return InfrastructureFailure(pair[0], pair[1], why)

    def holding(engine: _Engine) -> list[_Engine]:
        """The other engines still at work that may hand pairs back (told the end or not), or are handing some
        back now: nobody is told the end while pairs may still come back to hand out."""
        return [e for e in engines if e is not engine and not e.ended
                and (e.handing_back or hand_back.worth_waiting(len(e.pending), workers))]  # fmt: skip

    def ask_hand_back(taker: _Engine) -> None:
        """Ask the engine with the most pending pairs to hand some back for `taker`, once `taker`'s own run low
        (one request to an engine at a time; none again while its pending stand where it had none to give)."""
        givers = [e for e in holding(taker) if not e.handing_back and e.refused_at != len(e.pending)]
        if not givers:
            return
        giver = max(givers, key=lambda e: len(e.pending))
        count = hand_back.hand_back_size(len(taker.pending), len(giver.pending), workers)
        if count:
            giver.handing_back = True
            try:
                giver.send(("hand_back", count))
            except OSError:  # it ended meanwhile: its pending pairs become crash records
                giver.handing_back = False

    def choose(engine: _Engine) -> Any:
        """The engine's next pair; `hand_back.WINDOW_END` while it must wait for pairs another engine may hand
        back; None once there are no more."""
        while True:
            with balance:
                while not engine.ended and not may_take(engine):
                    balance.wait(0.5)
            pair = router.next_for(engine.index)
            if pair is not None or engine.ended or not holding(engine):
                return pair
            if not engine.flushed:  # what it holds in a window not yet full is built and evaluated meanwhile
                return hand_back.WINDOW_END
            with balance:
                ask_hand_back(engine)
                balance.wait(0.5)

    def answer(engine: _Engine) -> None:
        """Answer each of the engine's requests: a pair, a window's end, or None once there are no more."""
        try:
            while engine.requests.get() is not None:
                pair = choose(engine)
                window_end = pair is hand_back.WINDOW_END
                engine.told_end, engine.flushed = pair is None, pair is None or window_end
                sequence = next(sequences)
                with engine.pending_lock:
                    if engine.ended:
                        if pair is not None and not window_end:
                            router.give_back(pair)
                        return
                    if pair is not None and not window_end:
                        engine.pending[sequence] = pair
                    engine.asking = False
                changed()
                try:
                    item = None if pair is None or window_end else (sequence, *pair, offer_for(pair))
                    engine.send("window_end" if window_end else item)
                except OSError:  # it ended meanwhile: the pair goes to another engine
                    with engine.pending_lock:
                        if engine.pending.pop(sequence, None) is not None:
                            router.give_back(pair)
                    return
        except BaseException as exc:  # noqa: BLE001 - the input raised: surfaced in the caller's thread
            records.put(exc)

    def offer_for(pair: tuple[Candidate, Task]) -> SharedReference | None:
        """The reference an engine that handed back pairs of this pair's task shared, sent with the first of them
        handed out (its taker moves the files into its own cache, where its key is the same, rather than run the
        reference child again); an engine sent a later one makes its own."""
        with offers_lock:
            return offers.pop(pair[1].id, None)

    def handed_back(engine: _Engine, returned: list[int], shared: dict[str, SharedReference]) -> None:
        """Pairs the engine removed from its stream, unbegun: waiting again, first in line, for any engine; and
        the references it shared of their tasks (their directories are removed once the stream ends)."""
        with offers_lock:
            for task_id, offer in shared.items():
                offers[task_id] = offer
                shared_directories.append(offer.directory)
        with engine.pending_lock:
            pairs_back = [engine.pending.pop(sequence) for sequence in returned if sequence in engine.pending]
            engine.handing_back = False
            engine.refused_at = None if pairs_back else len(engine.pending)
        for pair in reversed(pairs_back):
            router.give_back(pair)
        if pairs_back:
            log.debug("engine %d handed back %d pairs", engine.index, len(pairs_back))
        changed()

    def serve(engine: _Engine) -> None:
        """Pass the engine's records on until it ends; then its pending pairs come back as crash records."""
        error, made, done = None, 0, False
        try:
            while True:
                kind, *body = engine.connection.recv()
                if kind == "next":
                    engine.asked_at, engine.asking, engine.has_asked = time.monotonic(), True, True
                    engine.requests.put(True)
                    changed()
                elif kind == "record":
                    sequence, record = body
                    with engine.pending_lock:
                        engine.pending.pop(sequence, None)
                    changed()
                    records.put(record)
                    made += 1
                elif kind == "handed_back":
                    handed_back(engine, *body)
                elif kind == "log":
                    replay_log(body[0], f"engine-{engine.index}")
                elif kind == "error":
                    error = body[0]
                elif kind == "done":
                    done = True
                    break
        except (EOFError, OSError):
            pass  # the engine ended (or was stopped): what it left pending is said below
        finally:
            engine.requests.put(None)
            if not done:  # it ended without saying so: its exit status says how
                engine.process.wait()
            with engine.pending_lock:
                engine.ended, engine.done = True, done
                left, engine.pending = list(engine.pending.values()), {}
            changed()
            why = (f"the engine process of GPU {engine.share['device']} ended (exit {engine.process.returncode}) "
                   "before this candidate's record")  # fmt: skip
            log.info("engine %d (GPU %s): %d records, %d pending at its end (%s)", engine.index, engine.share["device"],
                     made, len(left), "done" if done else f"exit {engine.process.returncode}")  # fmt: skip
            for pair in left:
                records.put(crash(pair, why))
            records.put(RuntimeError(f"the engine of GPU {engine.share['device']}: {error}") if error else _ENDED)

    threads: list[threading.Thread] = []
    try:
        for index, share in enumerate(shares):
            engines.append(_Engine(index, share))
        milestones.mark("engines_spawned")
        facts = environment.known_facts()  # read once here while the engines' interpreters start, not in each
        for engine in engines:
            engine.start(options, facts)
        milestones.mark("engines_told")
        for engine in engines:
            for target in (serve, answer):
                threads.append(threading.Thread(target=target, args=(engine,), daemon=True,
                                                name=f"ka-engine-{engine.index}-{target.__name__}"))  # fmt: skip
                threads[-1].start()
        ended = 0
        while ended < len(engines):
            item = records.get()
            if item is _ENDED:
                ended += 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
        if router.unfinished():  # every engine ended early: what none began is no record (a rerun resumes it)
            raise RuntimeError("every engine process ended before the stream's last candidate was handed out")
    finally:
        # An engine that said it is done has sent every record and stopped its children; the rest of its exit (its
        # interpreter's, 1.6-1.9 s on two H200s) need not hold the stream's end: it is reaped meanwhile. Every
        # other engine is stopped, and waited for, before the stream ends.
        stopping = [engine for engine in engines if not engine.done]
        for engine in stopping:
            if engine.process.poll() is None:
                engine.process.send_signal(signal.SIGTERM)
        for engine in engines:
            if engine in stopping:
                reap(engine)
            else:
                threading.Thread(
                    target=reap, args=(engine,), daemon=True, name=f"ka-engine-{engine.index}-reap"
                ).start()
        for thread in threads:
            thread.join(timeout=1.0)
        for directory in shared_directories:  # gone already where an engine moved it into its own cache
            if Path(directory).name.startswith(config.REFERENCE_SHARE_PREFIX):
                shutil.rmtree(directory, ignore_errors=True)


def reap(engine: _Engine) -> None:
    """Wait for an engine process to exit (killed after `ENGINE_STOP_GRACE_S`), then close its connection."""
    try:
        engine.process.wait(timeout=config.ENGINE_STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        engine.process.kill()
        engine.process.wait()
    engine.connection.close()


_ENDED = object()


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
