"""The stages of a verification stream (trusted parent side), each a small class with one `run` over typed channels.

    pairs ──► CompileStage ──► built ──► EvaluateStage × workers ──► evaluated ──► FinishStage × workers ──► records
                  │                      (one per device slot) ───────────────────────────────────────────► records
                  └──► tasks ──► PrepareStage (clean references, baselines)

- `CompileStage` reads the stream's pairs a window at a time, says each pair's task as it is read (a task's clean
  reference and baselines start at its first pair: the first evaluations wait for them), and builds each window on
  the compile workers; a build goes to `built` as it ends.
- `PrepareStage` starts each task's clean reference (CUDA: the device idles through the first compiles) and its
  baselines, in the caches' own worker pools.
- `EvaluateStage` is one evaluation worker on one device: it takes a built pair, runs it in a pre-started sandboxed
  child from its pool and has the parent judge it (`one_kernel.start_evaluation`). A record with nothing to wait
  for is assembled there.
- `FinishStage` assembles the record of a correct kernel once the task's baseline is in, and profiles it where
  asked (`one_kernel.finish_record`): an evaluation worker never waits for a baseline.

A stage's failure goes to the records channel, where the scheduler (`verifier.Verifier.stream`) raises it. Each
stage closes its output channel when it ends, so the next stage ends after the last item.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cache, partial
from typing import Any

from builder import config
from builder.candidates import Candidate
from builder.tasks import Task
from builder.verify import milestones
from builder.verify.compile import batching
from builder.verify.compile.build_child import held_build_zygote
from builder.verify.compile.build_queue import BuildQueue
from builder.verify.compile.extension import (
    CompileResult,
    build_extension,
    default_cache_dir,
    device_compile_env,
    recall_build,
    remember_members,
)
from builder.verify.compile.headers import HeaderTries
from builder.verify.engine import work_queues
from builder.verify.engine.baseline_cache import BaselineCache
from builder.verify.engine.channels import Channel
from builder.verify.engine.children import child_env
from builder.verify.engine.clean_reference import ReferenceCache
from builder.verify.engine.hand_back import read_window
from builder.verify.engine.infrastructure import Confirm
from builder.verify.engine.one_kernel import Evaluated, build_settings, finish_record, needs_baseline, start_evaluation
from builder.verify.options import VerifyOptions
from builder.verify.sandbox.pool import EvalPool


@dataclass(frozen=True)
class Built:
    """A pair and its build (a Python candidate's is an empty success: it needs none)."""

    candidate: Candidate
    task: Task
    compiled: CompileResult


class Stage:
    """A stage's thread: `run` until its input ends, its failure sent to `failures`, its outputs closed at the end."""

    name = "stage"

    def __init__(self, failures: Channel) -> None:
        self.failures = failures

    def run(self) -> None:
        raise NotImplementedError

    def outputs(self) -> list[Channel]:
        return []

    def start(self, label: str = "") -> threading.Thread:
        thread = threading.Thread(target=self._guarded, daemon=True, name=f"ka-{self.name}{label}")
        thread.start()
        return thread

    def _guarded(self) -> None:
        try:
            self.run()
        except BaseException as exc:  # noqa: BLE001 - raised by the scheduler in the stream's caller thread
            self.failures.send(exc)
        finally:
            for channel in self.outputs():
                channel.close()


class CompileStage(Stage):
    """The stream's pairs, read a window at a time and built on the compile workers, to `built`; each pair's task to
    `tasks` as the pair is read. The build zygote (`build_child`) is held for the stream. At most
    `COMPILE_WINDOWS_IN_FLIGHT` windows build at once: reading further ahead would claim pairs (an engine's come from
    the builder, a request each) before any worker could use them."""

    name = "compile"

    def __init__(self, options: VerifyOptions, pairs: Iterator[Any], built: Channel[Built], tasks: Channel[Task],
                 failures: Channel) -> None:  # fmt: skip
        super().__init__(failures)
        self.options, self.pairs, self.built, self.tasks = options, pairs, built, tasks
        self.stop = built.stop
        if not options.compile_workers:  # set once, where the stream's cores and GPUs are known (Verifier)
            raise ValueError("a compile stage needs options with their compile workers set, as a Verifier's are")
        self.workers = options.compile_workers
        self.window_size = max(1, options.batch_size) * self.workers

    def outputs(self) -> list[Channel]:
        return [self.built, self.tasks]

    def run(self) -> None:
        windows: list[threading.Thread] = []
        zygote = held_build_zygote(device_compile_env(self.options.backend, self.options.device_index),
                                   self.options.isolation)  # fmt: skip
        try:
            with zygote, ThreadPoolExecutor(self.workers, thread_name_prefix="ka-compile") as pool:
                builds = BuildQueue(pool)
                room = threading.Semaphore(config.COMPILE_WINDOWS_IN_FLIGHT)
                earlier: threading.Event | None = None  # set once the earlier window's builds are all queued
                for number in itertools.count():
                    while not self.stop.is_set() and not room.acquire(timeout=0.5):
                        continue
                    if self.stop.is_set() or (window := read_window(self.pairs, self.window_size, self._read)) is None:
                        break
                    if not window:  # an engine's input closed a window it had not begun
                        room.release()
                        continue
                    milestones.mark("first_window_received")
                    queued = threading.Event()
                    windows.append(threading.Thread(target=self._build_window,
                                                    args=(window, number, builds, room, earlier, queued),
                                                    daemon=True, name=f"ka-window-{number}"))  # fmt: skip
                    windows[-1].start()
                    earlier = queued
                for thread in windows:  # every rebuild queued and ended before the pool stops taking them
                    thread.join()
        finally:
            for thread in windows:
                thread.join()

    def _read(self, pair: tuple[Candidate, Task]) -> None:
        """Each pair's task, as the pair is read (not once the window is: a window of an engine's input takes
        seconds to read). Every pair's, not only a task's first: the caches start what they have not started and
        have room for, and a task refused while the reference cache was full starts at a later pair of it."""
        self.tasks.send(pair[1])

    def _build(self, source: str, language: str, tries: HeaderTries = HeaderTries.EVERY_RUNG,
               urgent: bool = False) -> CompileResult:  # fmt: skip
        """One build of the stream: not `urgent` (`build_extension`) but its first."""
        o = self.options
        return build_extension(source, language, o.backend, **build_settings(o), timeout_s=o.compile_timeout_s,
                               isolation=o.isolation, cancel=self.stop, tries=tries, urgent=urgent)  # fmt: skip

    def _build_window(self, window: list, number: int, builds: BuildQueue, room: threading.Semaphore,
                      earlier: threading.Event | None = None, queued: threading.Event | None = None) -> None:  # fmt: skip
        """One window's candidates, each sent on as its build ends; its builds queued once the `earlier` window's
        are, and `queued` set once its own are (`batching.compile_many`). A stopped stream kills compiles in flight
        and skips the rest: the pool's exit, and the interpreter's, would otherwise wait for every nvcc."""
        try:
            for candidate, task in window:
                if candidate.language == "python":
                    self.built.send(Built(candidate, task, CompileResult(ok=True)))
            backend, keyed = self.options.backend, build_settings(self.options)
            first_batch_size = self.options.first_batch_size if number == 0 else None  # the start's ramp
            urgent = self.options.urgent_builds  # the builds the device waits on; the Verifier fixes it
            urgent_builds = (config.urgent_builds_for(1) if urgent is None else urgent) if number == 0 else 0
            # The control kernel is built on its own: a build keeps no record until the control's has come
            # (pipeline/control_gate.py), and another member's compile error would build it a second time.
            alone = [index for index, (candidate, _) in enumerate(window) if _is_control(candidate, backend)]
            batching.compile_many([(c.source, c.language) for c, _ in window], self._build, self.options.batch_size,
                                  on_result=lambda index, result: self.built.send(Built(*window[index], result)),
                                  workers=self.workers, first_batch_size=first_batch_size,
                                  queue=builds, window=number, recall=partial(recall_build, backend=backend, **keyed),
                                  remember=partial(remember_members, backend=backend, **keyed), alone=alone,
                                  build_shared=partial(self._build, tries=HeaderTries.LIGHTEST_ONLY),
                                  build_culprit=partial(self._build, tries=HeaderTries.AFTER_LIGHTEST),
                                  urgent_builds=urgent_builds, after=earlier, queued=queued)  # fmt: skip
        except BaseException as exc:  # noqa: BLE001 - raised by the scheduler in the stream's caller thread
            self.failures.send(exc)
        finally:
            if queued is not None:  # a window that failed or stopped before queueing holds no later one back
                queued.set()
            room.release()


class PrepareStage(Stage):
    """Each task's clean reference and baselines, started as soon as its first pair is read."""

    name = "prepare"

    def __init__(self, options: VerifyOptions, tasks: Channel[Task], references: ReferenceCache,
                 baselines: BaselineCache, failures: Channel) -> None:  # fmt: skip
        super().__init__(failures)
        self.options, self.tasks, self.references, self.baselines = options, tasks, references, baselines
        self.reference_workers = ThreadPoolExecutor(config.REFERENCE_WARM_WORKERS, thread_name_prefix="ka-reference")
        self.baseline_workers = ThreadPoolExecutor(config.BASELINE_WARM_WORKERS, thread_name_prefix="ka-warm")

    def run(self) -> None:
        stop = self.tasks.stop
        while (task := self.tasks.receive()) is not None:
            if self.options.backend == "cuda":  # the device idles through the first compiles
                self.references.prewarm(task, self.options, self.reference_workers, cancel=stop)
            self.baselines.prewarm(task, self.options, self.baseline_workers, stop, self.references.first_ended)

    def close(self) -> None:
        self.reference_workers.shutdown(wait=False, cancel_futures=True)
        self.baseline_workers.shutdown(wait=False, cancel_futures=True)


class EvaluateStage(Stage):
    """One evaluation worker on one device: each built pair run in a sandboxed child from its pool and judged. A
    record with nothing to wait for (no baseline, no profile) is assembled here and goes straight to `records`;
    the rest go to the finishers, so that no worker waits for a baseline."""

    name = "evaluate"

    def __init__(self, options: VerifyOptions, built: Channel[Built], evaluated: Channel[Evaluated],
                 records: Channel, references: ReferenceCache, confirm: Confirm) -> None:  # fmt: skip
        super().__init__(records)
        self.options, self.built, self.evaluated, self.records = options, built, evaluated, records
        self.references, self.confirm = references, confirm
        self.pool: EvalPool | None = None

    def outputs(self) -> list[Channel]:
        return [self.evaluated, self.records]

    def run(self) -> None:
        options = self.options
        cache_root = options.build_cache_dir or default_cache_dir()
        cache_root.mkdir(parents=True, exist_ok=True)  # before the pool: its children bind it as it is now
        wait = options.refill_after_first_reference
        wait = config.EVAL_REFILL_AFTER_FIRST_REFERENCE if wait is None else wait
        self.pool = EvalPool(options.prestart, options.backend == "cuda", child_env(options), options.isolation,
                             options.child_module, [cache_root, config.TASKS_DIR], options.fork_children,
                             self.references.first_ended if wait else None)  # fmt: skip
        with self.pool:
            while (item := self.built.receive()) is not None:
                compiled, candidate, task = item.compiled, item.candidate, item.task
                usable = compiled.ok and self.pool.covers([task.path.parent, compiled.library_path])
                usable = usable and work_queues.fitting(candidate, options) is options
                milestones.mark("first_build_taken")
                pooled = self.pool.take() if usable else None
                control = _is_control(candidate, options.backend)  # the build's records wait for it
                evaluated = start_evaluation(compiled, candidate, task, replace(options, first_in_line=control),
                                             pooled, self.references, self.confirm)  # fmt: skip
                milestones.mark("first_evaluation_returned")
                if control:  # only its verdict is asked of it
                    self.records.send(finish_record(evaluated, verdict_only=True))
                elif needs_baseline(evaluated) or options.profile:
                    self.evaluated.send(evaluated)
                else:
                    self.records.send(finish_record(evaluated))

    def close(self) -> None:
        if self.pool is not None:  # pre-started children must not outlive the stream
            self.pool.close()


class FinishStage(Stage):
    """Each evaluated kernel's record: its task's baseline waited for where it needs one, its profiles attached."""

    name = "finish"

    def __init__(self, evaluated: Channel[Evaluated], records: Channel, baselines: BaselineCache) -> None:
        super().__init__(records)
        self.evaluated, self.records, self.baselines = evaluated, records, baselines

    def outputs(self) -> list[Channel]:
        return [self.records]

    def run(self) -> None:
        while (evaluated := self.evaluated.receive()) is not None:
            self.records.send(finish_record(evaluated, self.baselines))


def device_options(options: VerifyOptions, device_index: int) -> VerifyOptions:
    return replace(options, device_index=device_index)


def _is_control(candidate: Candidate, backend: str) -> bool:
    """The stream's control kernel (`preflight.control_pair`): its generator and its source both, so that a candidate
    that only calls itself "control" gets none of its treatment."""
    return candidate.generator == config.INFRA_CONTROL_GENERATOR and candidate.source == _control_source(backend)


@cache
def _control_source(backend: str) -> str | None:
    """The source of this backend's control kernel (`config.INFRA_CONTROL_FILES`), None where it has none."""
    path = config.INFRA_CONTROL_FILES.get(backend)
    return path.read_text() if path is not None else None
