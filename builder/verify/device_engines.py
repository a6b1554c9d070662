"""One engine process per GPU: `Verifier.stream` over several GPUs (trusted side, like the parent).

One process that watches, judges and grants device turns for the children of every GPU is bound by its one
interpreter lock: on two H200s a single parent spent 1.9 cores of Python on 1.4 kernels/s and the second GPU
added 17 %. So a stream over N GPUs runs N engine processes (`engine_process.py`),
each a `Verifier` over one GPU (its CUDA_VISIBLE_DEVICES) on its own share of the cores, with its share of the
compile workers and the build's seeds. This process only hands out pairs and gathers records:

- An engine asks for its next pair when its stream wants one. It gets the first waiting pair, in the input's
  order, of a task it already has, or of a task nobody has yet while it has no more tasks than any other engine
  (a task's clean reference and baselines are then made once, and the tasks split evenly); else the first
  waiting pair of a task nobody has; else the first waiting pair, whose task it then shares: no engine idles
  while pairs wait. Input order, not its own tasks first: an engine that took its tasks' pairs ahead of the rest
  worked through one task at a time, all its workers waiting on that task's reference at the start and its
  slowest tasks' copies timed one after another at the end (docs/gpu-runs.md, 2026-11-26).
- An engine more than a shared build's worth of pairs (`batch_size`) ahead of the least loaded other engine
  waits: an engine reads its stream a window of builds at a time, and the first up would otherwise take a short
  stream whole. Once the input is all read, the last pairs go to the least loaded: engines read far ahead of
  what they evaluate, so the pairs are all handed out long before the last records, and an engine a build ahead
  at that moment evaluated a build's worth of kernels alone at the end.
- A pair is pending from the moment it is handed out until its record comes back. An engine that dies sends
  each of its pending pairs back as a `crash` record (as an executor does for a candidate it lost): none lost,
  none twice; the other engines go on. Should every engine end early, the stream raises: the pairs none of them
  began get no record, and a rerun of the build resumes them.
- Closing the stream stops every engine (SIGTERM: each closes its own stream, and its children die with it).
- An engine's `builder.*` log records come to this process's loggers, at the levels set here when the stream
  began (`processName` says which engine): a caller's handlers see them as they would an in-process engine's.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import replace
from multiprocessing.connection import Connection, Pipe
from typing import TYPE_CHECKING, Any

from builder import config
from builder.verify import environment, milestones
from builder.verify.engine_process import MODULE

if TYPE_CHECKING:
    from builder.candidates import Candidate
    from builder.tasks import Task
    from builder.verify.engine import VerifyOptions
    from schemas import KernelRecord

log = logging.getLogger(__name__)


class Router:
    """The pairs waiting to be handed out, read ahead from the stream's input, and which engine has which task.
    Thread-safe: each engine's reader thread asks for that engine's next pair."""

    def __init__(self, pairs: Iterable[tuple[Candidate, Task]], lookahead: int, engines: int = 1) -> None:
        self._source = iter(pairs)
        self._waiting: deque[tuple[Candidate, Task]] = deque()
        self._lookahead = max(1, lookahead)
        self._engines = max(1, engines)
        self._owner: dict[str, int] = {}  # task id -> the engine that took its first pair
        self._taken: dict[int, set[str]] = {}  # engine -> the tasks it has had pairs of (its own, and any shared)
        self._lock = threading.Lock()
        self._exhausted = False

    def next_for(self, engine: int) -> tuple[Candidate, Task] | None:
        """The next pair for `engine`, or None once every pair is handed out."""
        with self._lock:
            while not self._exhausted and len(self._waiting) < self._lookahead:
                try:
                    self._waiting.append(next(self._source))
                except StopIteration:
                    self._exhausted = True
            if not self._waiting:
                return None
            chosen = self._choose(engine)
            pair = self._waiting[chosen]
            del self._waiting[chosen]
            self._owner.setdefault(pair[1].id, engine)
            self._taken.setdefault(engine, set()).add(pair[1].id)
            return pair

    def give_back(self, pair: tuple[Candidate, Task]) -> None:
        """A pair an engine could not take: first in line again."""
        with self._lock:
            self._waiting.appendleft(pair)

    def all_read(self) -> bool:
        """Whether the input is read to its end (the waiting pairs are the stream's last)."""
        with self._lock:
            return self._exhausted

    def drained(self) -> bool:
        """Whether every pair is handed out (known without reading further)."""
        with self._lock:
            return self._exhausted and not self._waiting

    def unfinished(self) -> bool:
        """Whether pairs are still waiting or unread (none is read beyond the first)."""
        with self._lock:
            if not self._waiting and not self._exhausted:
                try:
                    self._waiting.append(next(self._source))
                except StopIteration:
                    self._exhausted = True
            return bool(self._waiting)

    def _choose(self, engine: int) -> int:
        mine = self._taken.get(engine, set())
        owned = Counter(self._owner.values())
        may_claim = all(owned[engine] <= owned[other] for other in range(self._engines) if other != engine)
        unowned = None
        for index, (_, task) in enumerate(self._waiting):
            if task.id in mine:
                return index
            if task.id not in self._owner:
                if may_claim:
                    return index
                unowned = index if unowned is None else unowned
        return unowned if unowned is not None else 0


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


def within_reach(pending: int, others: list[int], slack: int) -> bool:
    """Whether an engine holding `pending` pairs may take one more beside engines holding `others`: not while it
    is more than `slack` ahead of the least loaded."""
    return not others or pending <= min(others) + slack


def balanced(engine: Any, engines: list[Any], last_pairs: bool, slack: int, now: float) -> bool:
    """Whether `engine` may take a pair beside `engines` (each with its `pending` pairs, `ended`, `told_end`,
    `asking`, `has_asked` and `asked_at`): not while it is more than `slack` ahead of the least loaded of those
    still asking, or starting (one that has not asked for `ENGINE_BALANCE_WAIT_S` holds nobody back).

    Once the input is all read (`last_pairs`), without slack, against those starting or reading now (asking, or
    answered within `ENGINE_READING_S`): the last pairs go to the least loaded of the engines that want them, and
    none waits long for one that does not (its window read, it waits for room for the next). Not only those asking
    at that moment: two engines reading side by side ask in turn, and the last pairs of a 96-kernel stream went
    53 to 43 (docs/gpu-runs.md)."""

    def holds_back(e: Any) -> bool:
        if not last_pairs or not e.has_asked:  # one starting holds the others back as long as ever
            return now - e.asked_at < config.ENGINE_BALANCE_WAIT_S
        return e.asking or now - e.asked_at < config.ENGINE_READING_S

    others = [len(e.pending) for e in engines if e is not engine and not e.ended and not e.told_end and holds_back(e)]
    return within_reach(len(engine.pending), others, 0 if last_pairs else slack)


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
        self.told_end = False  # it was told there are no more pairs
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
        self.process = subprocess.Popen([sys.executable, "-m", MODULE, str(theirs.fileno())], env=env,
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
    from builder.pipeline.executors import failure_record

    shares = engine_shares(devices, cores, options.compile_workers)
    window = max(1, options.batch_size) * max(1, shares[0]["compile_workers"])
    router = Router(pairs, lookahead=window * len(devices), engines=len(devices))
    records: queue.Queue = queue.Queue()
    sequences = iter(range(1 << 62))
    engines: list[_Engine] = []
    balance = threading.Condition()  # notified whenever an engine's pending pairs change or it ends
    slack = max(1, options.batch_size)  # while input is left to read; none for its last pairs

    def may_take(engine: _Engine) -> bool:
        return router.drained() or balanced(engine, engines, router.all_read(), slack, time.monotonic())

    def changed() -> None:
        with balance:
            balance.notify_all()

    def crash(pair: tuple[Candidate, Task], why: str) -> KernelRecord:
        return failure_record(pair[0], pair[1], options.backend, "crash", why)

    def answer(engine: _Engine) -> None:
        """Hand the engine a pair for each of its requests (None once there are no more)."""
        try:
            while engine.requests.get() is not None:
                with balance:
                    while not engine.ended and not may_take(engine):
                        balance.wait(0.5)
                pair = router.next_for(engine.index)
                engine.told_end = pair is None
                sequence = next(sequences)
                with engine.pending_lock:
                    if engine.ended:
                        if pair is not None:
                            router.give_back(pair)
                        return
                    if pair is not None:
                        engine.pending[sequence] = pair
                    engine.asking = False
                changed()
                try:
                    engine.send(None if pair is None else (sequence, *pair))
                except OSError:  # it ended meanwhile: the pair goes to another engine
                    with engine.pending_lock:
                        if engine.pending.pop(sequence, None) is not None:
                            router.give_back(pair)
                    return
        except BaseException as exc:  # noqa: BLE001 - the input raised: surfaced in the caller's thread
            records.put(exc)

    def serve(engine: _Engine) -> None:
        """Pass the engine's records on until it ends; then its pending pairs come back as crash records."""
        error, made = None, 0
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
                elif kind == "log":
                    replay_log(body[0], f"engine-{engine.index}")
                elif kind == "error":
                    error = body[0]
                elif kind == "done":
                    break
        except (EOFError, OSError):
            pass  # the engine ended (or was stopped): what it left pending is said below
        finally:
            engine.requests.put(None)
            engine.process.wait()
            with engine.pending_lock:
                engine.ended = True
                left, engine.pending = list(engine.pending.values()), {}
            changed()
            why = (f"the engine process of GPU {engine.share['device']} ended (exit {engine.process.returncode}) "
                   "before this candidate's record")  # fmt: skip
            log.info("engine %d (GPU %s): %d records, %d pending at its end (exit %s)", engine.index,
                     engine.share["device"], made, len(left), engine.process.returncode)  # fmt: skip
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
        for engine in engines:
            if engine.process.poll() is None:
                engine.process.send_signal(signal.SIGTERM)
        for engine in engines:
            try:
                engine.process.wait(timeout=config.ENGINE_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                engine.process.kill()
                engine.process.wait()
            engine.connection.close()
        for thread in threads:
            thread.join(timeout=1.0)


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
    logger = logging.getLogger(str(fields.get("name", MODULE)))
    level = int(fields.get("levelno", logging.INFO))
    if logger.isEnabledFor(level):
        logger.handle(logging.makeLogRecord(dict(fields, processName=process_name)))
