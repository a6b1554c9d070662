"""One engine process per GPU: `Verifier.stream` over several GPUs (trusted side, like the parent).

One process that watches, judges and grants device turns for the children of every GPU is bound by its one
interpreter lock: on two H200s a single parent spent 1.9 cores of Python on 1.4 kernels/s and the second GPU
added 17 %. So a stream over N GPUs runs N engine processes (`engine_process.py`),
each a `Verifier` over one GPU (its CUDA_VISIBLE_DEVICES) on its own share of the cores, with its share of the
compile workers and the build's seeds. This process only hands out pairs and gathers records (`EngineFleet`, over
an `engine_handles.EngineHandle` per engine):

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

import itertools
import logging
import queue
import shutil
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder import config
from builder.verify import environment, milestones
from builder.verify.engine import hand_back
from builder.verify.engine.engine_handles import EngineHandle, replay_log
from builder.verify.engine.infrastructure import InfrastructureFailure
from builder.verify.engine.routing import Router, balanced

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
    against 1.83x with slices (measured 2026-11-26)."""
    count = len(devices)
    per_engine = len(cores) // count
    shares = []
    for index, device in enumerate(devices):
        mine = cores[index * per_engine : (index + 1) * per_engine] if per_engine else cores
        shares.append({"device": device, "cores": mine, "compile_workers": max(1, compile_workers // count)})
    return shares


_ENDED = object()  # in the fleet's records: one engine has ended, its records and crash records all passed on


class EngineFleet:
    """The engine processes of one stream, and which pairs each is handed (`routing`, `hand_back`).

    Each engine has two threads here: `serve` passes on its messages (its records, its hand-backs, its log records)
    and `answer` answers its requests for pairs, so a slow input never holds its records up. The caller's thread
    takes the records (`records`), and stops the engines at the end (`close`).

    What those threads share, and what guards it:

    - `schedule` (a Condition) guards every engine's load (`EngineHandle.pending`, `.ended`, `.done`,
      `.told_end`, `.flushed`, `.handing_back`, `.refused_at`, `.asking`, `.has_asked`, `.asked_at`) and
      `_sequences`; it is notified whenever a load changes, so an engine waiting for its turn, or for pairs
      another may hand back, looks again. Held, it may be followed by the router's lock or an engine's
      `send_lock`, never the other way round.
    - `_offers_lock` guards `_offers` (task id -> the clean reference shared with that task's handed-back pairs)
      and `_shared_directories` (the references' directories, removed at the stream's end).
    - `router` and `_records` guard themselves (the router's lock; a queue of records, crash records,
      exceptions for the caller's thread, and `_ENDED` once per engine).
    - `engines` and `_threads` are filled by the caller's thread before any engine's thread starts.
    """

    def __init__(self, router: Router, workers: int, slack: int) -> None:
        self.router = router
        self.workers = workers  # each engine's evaluation workers at once (an engine has one device)
        self.slack = slack  # how far an engine may run ahead of the least loaded while input is left to read
        self.engines: list[EngineHandle] = []
        self.schedule = threading.Condition()
        self._sequences = itertools.count()  # each pair handed out gets the next: its record comes back with it
        self._offers: dict[str, SharedReference] = {}
        self._shared_directories: list[str] = []
        self._offers_lock = threading.Lock()
        self._records: queue.Queue = queue.Queue()
        self._threads: list[threading.Thread] = []

    # The caller's thread: start, records, close.

    def spawn(self, shares: list[dict[str, Any]]) -> None:
        """Start an engine process per share (`engine_shares`); they wait to be told their options."""
        for index, share in enumerate(shares):
            self.engines.append(EngineHandle.spawn(index, share))

    def start(self, options: VerifyOptions, facts: dict[str, Any]) -> None:
        """Tell every engine its options and the machine's facts (`environment.known_facts`). The engines share
        one disk for their scratch: each has its share of the room (`disk_room.py`)."""
        options = replace(options, disk_share=options.disk_share / max(len(self.engines), 1))
        for engine in self.engines:
            engine.start(options, facts)

    def start_threads(self) -> None:
        """Each engine's `serve` and `answer` threads."""
        for engine in self.engines:
            for target in (self.serve, self.answer):
                thread = threading.Thread(target=target, args=(engine,), daemon=True,
                                          name=f"ka-engine-{engine.index}-{target.__name__}")  # fmt: skip
                self._threads.append(thread)
                thread.start()

    def records(self) -> Iterator[KernelRecord | InfrastructureFailure]:
        """The engines' records and crash records, in completion order, until every engine has ended; what an
        engine's thread raised (its input's exception, an engine's error) is raised here.

        A pair handed back to the router for an engine that then ended, where every other engine had been told the
        end, is one more crash record (the build tries it again)."""
        ended = 0
        while ended < len(self.engines):
            item = self._records.get()
            if item is _ENDED:
                ended += 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
        if returned := self.router.take_returned():
            why = "it was handed back unbegun, and no engine was left to take it (one had ended)"
            incident = f"pairs handed back at the stream's end ({uuid.uuid4().hex[:8]})"
            for candidate, task in returned:
                yield InfrastructureFailure(candidate, task, why, incident)
        if self.router.unfinished():  # every engine ended early: what none began is no record (a rerun resumes it)
            raise RuntimeError("every engine process ended before the stream's last candidate was handed out")

    def close(self) -> None:
        """Stop every engine that has not said it is done, and wait for it; reap the rest meanwhile; remove the
        clean references shared with handed-back pairs.

        An engine that said it is done has sent every record and stopped its children; the rest of its exit (its
        interpreter's, 1.6-1.9 s on two H200s) need not hold the stream's end."""
        with self.schedule:
            stopping = [engine for engine in self.engines if not engine.done]
        for engine in stopping:
            engine.stop()
        for engine in self.engines:
            if engine in stopping:
                engine.reap()
            else:
                threading.Thread(target=engine.reap, daemon=True, name=f"ka-engine-{engine.index}-reap").start()
        for thread in self._threads:
            thread.join(timeout=1.0)
        with self._offers_lock:
            directories = list(self._shared_directories)
        for directory in directories:  # gone already where an engine moved it into its own cache
            if Path(directory).name.startswith(config.REFERENCE_SHARE_PREFIX):
                shutil.rmtree(directory, ignore_errors=True)

    # An engine's `serve` thread: its messages.

    def serve(self, engine: EngineHandle) -> None:
        """Pass the engine's messages on until it ends; then its pending pairs come back as crash records."""
        error, made, done = None, 0, False
        try:
            while True:
                kind, *body = engine.connection.recv()
                if kind == "next":
                    self.requested(engine)
                elif kind == "record":
                    self.recorded(engine, *body)
                    made += 1
                elif kind == "handed_back":
                    self.receive_hand_back(engine, *body)
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
            self.engine_ended(engine, done, made, error)

    def requested(self, engine: EngineHandle) -> None:
        """The engine asks for its next pair: its `answer` thread chooses it."""
        with self.schedule:
            engine.asked_at, engine.asking, engine.has_asked = time.monotonic(), True, True
            engine.requests.put(True)
            self.schedule.notify_all()

    def recorded(self, engine: EngineHandle, sequence: int, record: KernelRecord | InfrastructureFailure) -> None:
        """The record of a pair the engine had pending: passed on to the caller."""
        with self.schedule:
            engine.pending.pop(sequence, None)
            self.schedule.notify_all()
        self._records.put(record)

    def receive_hand_back(self, engine: EngineHandle, returned: list[int], shared: dict[str, SharedReference]) -> None:
        """Pairs the engine removed from its stream, unbegun (by their sequences): waiting again, first in line, for
        any engine; and the references it shared of their tasks (their directories are removed at the stream's end).
        A sequence no longer pending (its record came first) is passed over."""
        with self._offers_lock:
            for task_id, offer in shared.items():
                self._offers[task_id] = offer
                self._shared_directories.append(offer.directory)
        with self.schedule:  # from pending to waiting at once: nobody is told the end in between
            pairs_back = [engine.pending.pop(sequence) for sequence in returned if sequence in engine.pending]
            engine.handing_back = False
            engine.refused_at = None if pairs_back else len(engine.pending)
            for pair in reversed(pairs_back):
                self.router.give_back(pair)
            self.schedule.notify_all()
        if pairs_back:
            log.debug("engine %d handed back %d pairs", engine.index, len(pairs_back))

    def engine_ended(self, engine: EngineHandle, done: bool, made: int, error: str | None) -> None:
        """The engine has ended: its `answer` thread stops, and each pair it left pending becomes a crash record (an
        engine runs no candidate code: its death is the machinery's, and the build tries the pair again)."""
        engine.requests.put(None)
        if not done:  # it ended without saying so: its exit status says how
            engine.process.wait()
        with self.schedule:
            engine.ended, engine.done = True, done
            left, engine.pending = list(engine.pending.values()), {}
            self.schedule.notify_all()
        device, returncode = engine.share["device"], engine.process.returncode
        why = f"the engine process of GPU {device} ended (exit {returncode}) before this candidate's record"
        log.info("engine %d (GPU %s): %d records, %d pending at its end (%s)", engine.index, device, made, len(left),
                 "done" if done else f"exit {returncode}")  # fmt: skip
        incident = f"engine {engine.index} of GPU {device} ended ({uuid.uuid4().hex[:8]})"
        for candidate, task in left:
            self._records.put(InfrastructureFailure(candidate, task, why, incident))
        self._records.put(RuntimeError(f"the engine of GPU {device}: {error}") if error else _ENDED)

    # An engine's `answer` thread: its requests for pairs.

    def answer(self, engine: EngineHandle) -> None:
        """Answer each of the engine's requests: a pair, a window's end, or None once there are no more."""
        try:
            while engine.requests.get() is not None:
                if not self.hand_out(engine, self.choose(engine)):
                    return
        except BaseException as exc:  # noqa: BLE001 - the input raised: surfaced in the caller's thread
            self._records.put(exc)

    def hand_out(self, engine: EngineHandle, pair: Any) -> bool:
        """Send the engine its answer (`choose`), a pair pending with it from now on; False where the engine has
        ended meanwhile (a pair goes back to the router, for another engine)."""
        is_pair = pair is not None and pair is not hand_back.WINDOW_END
        with self.schedule:
            sequence = next(self._sequences)
            engine.told_end, engine.flushed = pair is None, not is_pair
            if engine.ended:
                if is_pair:
                    self.router.give_back(pair, undelivered=True)
                    self.schedule.notify_all()
                return False
            if is_pair:
                engine.pending[sequence] = pair  # in transit still: the send may yet fail
            engine.asking = False
            self.schedule.notify_all()
        try:
            if pair is hand_back.WINDOW_END:
                engine.send("window_end")
            else:
                engine.send(None if pair is None else (sequence, *pair, self.offer_for(pair)))
        except OSError:  # it ended meanwhile: the pair goes to another engine
            with self.schedule:
                if is_pair and engine.pending.pop(sequence, None) is not None:
                    self.router.give_back(pair, undelivered=True)
                elif is_pair:  # its end made it a crash record already
                    self.router.delivered()
                self.schedule.notify_all()
            return False
        if is_pair:
            with self.schedule:
                self.router.delivered()
                self.schedule.notify_all()
        return True

    def choose(self, engine: EngineHandle) -> Any:
        """The engine's next pair; `hand_back.WINDOW_END` while it must wait for pairs another engine may hand
        back; None once there are no more. Its waits look again every half second: an engine silent too long
        stops holding others back (`routing.balanced`)."""
        while True:
            with self.schedule:
                while not engine.ended and not self.may_take(engine):
                    self.schedule.wait(0.5)
            pair = self.router.next_for(engine.index)  # outside `schedule`: it may read the input, perhaps slowly
            with self.schedule:
                if pair is not None or engine.ended:
                    return pair
                holding = self.holding(engine)
                if not holding and not self.router.in_transit():  # no pair can come back for it: the end
                    return None
                if not engine.flushed:  # what it holds in a window not yet full is built and evaluated meanwhile
                    return hand_back.WINDOW_END
                if holding:
                    self.ask_hand_back(engine)
                self.schedule.wait(0.5)

    def may_take(self, engine: EngineHandle) -> bool:
        """Whether the engine may take a pair now (not too far ahead of the others: `routing.balanced`). Under
        `schedule`."""
        return self.router.drained() or balanced(engine, self.engines, self.router.all_read(), self.slack,
                                                 time.monotonic())  # fmt: skip

    def holding(self, engine: EngineHandle) -> list[EngineHandle]:
        """The other engines still at work that may hand pairs back (told the end or not), or are handing some
        back now: nobody is told the end while pairs may still come back to hand out. Under `schedule`."""
        return [e for e in self.engines if e is not engine and not e.ended
                and (e.handing_back or hand_back.worth_waiting(len(e.pending), self.workers))]  # fmt: skip

    def ask_hand_back(self, taker: EngineHandle) -> None:
        """Ask the engine with the most pending pairs to hand some back for `taker`, once `taker`'s own run low
        (one request to an engine at a time; none again while its pending stand where it had none to give).
        Under `schedule`, which its answer needs: the taker, waiting on it next, cannot miss the answer."""
        givers = [e for e in self.holding(taker) if not e.handing_back and e.refused_at != len(e.pending)]
        if not givers:
            return
        giver = max(givers, key=lambda e: len(e.pending))
        count = hand_back.hand_back_size(len(taker.pending), len(giver.pending), self.workers)
        if count:
            giver.handing_back = True
            try:
                giver.send(("hand_back", count))
            except OSError:  # it ended meanwhile: its pending pairs become crash records
                giver.handing_back = False

    def offer_for(self, pair: tuple[Candidate, Task]) -> SharedReference | None:
        """The reference an engine that handed back pairs of this pair's task shared, sent with the first of them
        handed out (its taker moves the files into its own cache, where its key is the same, rather than run the
        reference child again); an engine sent a later one makes its own."""
        with self._offers_lock:
            return self._offers.pop(pair[1].id, None)


def stream(options: VerifyOptions, pairs: Iterable[tuple[Candidate, Task]], devices: list[str | None],
           cores: list[int]) -> Iterator[KernelRecord]:  # fmt: skip
    """Records of `pairs` verified by one engine process per entry of `devices`, in completion order. `options`
    are a Verifier's: their compile workers, for the whole stream, are set."""
    shares = engine_shares(devices, cores, options.compile_workers)
    window = max(1, options.batch_size) * max(1, shares[0]["compile_workers"])
    router = Router(pairs, lookahead=window * len(devices), engines=len(devices))
    fleet = EngineFleet(router, workers=options.workers_per_device(), slack=max(1, options.batch_size))
    try:
        fleet.spawn(shares)
        milestones.mark("engines_spawned")
        facts = environment.known_facts()  # read once here while the engines' interpreters start, not in each
        fleet.start(options, facts)
        milestones.mark("engines_told")
        fleet.start_threads()
        yield from fleet.records()
    finally:
        fleet.close()
