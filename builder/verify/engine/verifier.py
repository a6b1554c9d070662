"""Verification engine, trusted parent side: compile, evaluate in a fresh sandboxed child, assemble records.

Candidate code never runs in this process: compilation happens in `compile_child`, evaluation in
`child`, both under `sandbox.run_sandboxed`. This module only writes job files, reads result files
(treated as untrusted input) and turns them into records (`verdict.assemble_record`).
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial

from builder import config
from builder.candidates import Candidate
from builder.errors import InfrastructureError
from builder.tasks import Task
from builder.verify import environment, milestones
from builder.verify.compile import batching
from builder.verify.compile.build_queue import BuildQueue
from builder.verify.compile.extension import (
    CompileResult,
    build_extension,
    default_cache_dir,
    recall_build,
    remember_members,
)
from builder.verify.engine import device_engines, preflight, work_queues
from builder.verify.engine.baseline_cache import BaselineCache
from builder.verify.engine.children import child_env
from builder.verify.engine.clean_reference import ReferenceCache
from builder.verify.engine.hand_back import UnstartedWork, read_window
from builder.verify.engine.infrastructure import InfrastructureFailure
from builder.verify.engine.one_kernel import (
    Evaluated,
    build_settings,
    compile_candidate,
    finish_record,
    needs_baseline,
    start_evaluation,
)
from builder.verify.options import VerifyOptions
from builder.verify.sandbox.pool import EvalPool, PooledChild
from schemas import KernelRecord

log = logging.getLogger(__name__)


def evaluate_compiled(compiled: CompileResult, candidate: Candidate, task: Task, options: VerifyOptions,
                      pooled: PooledChild | None = None, baselines: BaselineCache | None = None,
                      references: ReferenceCache | None = None) -> KernelRecord | InfrastructureFailure:  # fmt: skip
    """Evaluate a compiled candidate in a fresh sandboxed child, judge it against the task's clean reference
    (computed once per task by `references`) and assemble its record."""
    evaluated = start_evaluation(compiled, candidate, task, options, pooled, references, preflight.confirm)
    return finish_record(evaluated, baselines)


def verify(candidate: Candidate, task: Task, options: VerifyOptions) -> KernelRecord:
    """Compile and evaluate one candidate (what `kernel-archive verify` runs); InfrastructureError where the
    machinery, not the candidate, failed."""
    options = options.with_seeds()
    record = evaluate_compiled(compile_candidate(candidate, task, options), candidate, task, options)
    if isinstance(record, InfrastructureFailure):
        raise InfrastructureError(f"{candidate.kernel_name} was not verified: {record.reason}")
    return record


_DONE = object()


class Verifier:
    """Many candidates: a compile pool on the CPU cores pipelined with evaluation workers, several per GPU."""

    def __init__(self, options: VerifyOptions) -> None:
        self.options = options.with_seeds()  # one draw per build: every candidate sees the same trials
        self.engine_devices = device_engines.engine_devices(self.options)
        if self.options.backend == "cuda" and not self.engine_devices:  # engine processes keep their own
            from builder.verify.engine.device_gate import keep_timing_cores

            keep_timing_cores(self._devices(), config.TIMING_CORES_PER_GPU)
        self.baselines = BaselineCache(self.options.baseline_cache_dir)
        self.references = ReferenceCache()
        self._unstarted: UnstartedWork | None = None  # the running stream's built pairs no worker has taken

    def preflight(self) -> None:
        """The control kernel through this machinery before the first candidate (`preflight.preflight`)."""
        preflight.preflight(self.options)

    def _build(self, source: str, language: str, cancel: threading.Event | None = None) -> CompileResult:
        o = self.options
        return build_extension(source, language, o.backend, **build_settings(o), timeout_s=o.compile_timeout_s,
                               isolation=o.isolation, cancel=cancel)  # fmt: skip

    def _devices(self) -> int:
        return max(1, environment.gpu_count()) if self.options.backend == "cuda" else 1

    def _eval_workers(self) -> int:
        """Workers per device: their start-ups, checks and judging overlap; each timing window owns the device."""
        return self._devices() * self.options.workers_per_device()

    def hand_back(self, count: int) -> list[tuple[Candidate, Task]]:
        """Up to `count` pairs of the running stream that no evaluation worker has taken, built (`hand_back`):
        removed from this stream, which makes no record of them."""
        if self._unstarted is None:
            return []
        taken = self._unstarted.take_back(count, lambda item: item is not _DONE and item[1].ok,
                                          group=lambda item: item[0][1].id)  # fmt: skip
        return [pair for pair, _ in taken]

    def stream(self, pairs: Iterable[tuple[Candidate, Task]]) -> Iterator[KernelRecord]:
        """Yield one record per (candidate, task), in completion order."""
        if self.engine_devices:
            cores = sorted(os.sched_getaffinity(0))
            yield from device_engines.stream(self.options, pairs, self.engine_devices, cores)
            return
        milestones.mark("stream_started")
        workers = self._eval_workers()
        work = self._unstarted = UnstartedWork(maxsize=max(2, workers * self.options.batch_size))
        records: queue.Queue = queue.Queue()
        source = iter(pairs)
        stop = threading.Event()

        def offer(item: object) -> None:
            """Queue work unless the consumer has gone (a blocked put would hang the compile threads)."""
            while not stop.is_set():
                try:
                    work.put(item, timeout=0.5)
                    return
                except queue.Full:
                    continue

        warmers = ThreadPoolExecutor(config.BASELINE_WARM_WORKERS, thread_name_prefix="ka-warm")
        finishers = ThreadPoolExecutor(workers, thread_name_prefix="ka-finish")
        reference_warmers = ThreadPoolExecutor(config.REFERENCE_WARM_WORKERS, thread_name_prefix="ka-reference")

        def compile_window(window: list, number: int, builds: BuildQueue, room: threading.Semaphore) -> None:
            """Build one window's candidates, each offered to the evaluation workers as its build ends."""
            try:
                sources = [(c.source, c.language) for c, _ in window]
                backend, keyed = self.options.backend, build_settings(self.options)
                for index, (candidate, _) in enumerate(window):
                    if candidate.language == "python":
                        offer((window[index], CompileResult(ok=True)))
                # A stopped stream (the build interrupted) kills compiles in flight and skips the rest: the
                # pool's exit, and the interpreter's, would otherwise wait for every nvcc to finish.
                first_batch_size = config.COMPILE_FIRST_BATCH_SIZE if number == 0 else None  # the start's ramp
                batching.compile_many(sources, partial(self._build, cancel=stop), self.options.batch_size,
                                      on_result=lambda index, result: offer((window[index], result)),
                                      workers=self.options.compile_workers, first_batch_size=first_batch_size,
                                      queue=builds, window=number, recall=partial(recall_build, backend=backend,
                                      **keyed), remember=partial(remember_members, backend=backend, **keyed))  # fmt: skip
            except BaseException as exc:  # noqa: BLE001 - surfaced by stream() in the caller's thread
                records.put(exc)
            finally:
                room.release()

        def prewarm(pair: tuple[Candidate, Task]) -> None:
            """Start the task's clean reference and baseline as its first pair is read, not once the window is:
            the first evaluations wait for the reference, and an engine's window of pairs takes seconds to read."""
            task = pair[1]
            if self.options.backend == "cuda":  # the device idles through the first compiles
                self.references.prewarm(task, self.options, reference_warmers, cancel=stop)
            self.baselines.prewarm(task, self.options, warmers, stop, self.references.first_ended)

        def produce() -> None:
            compiling: list[threading.Thread] = []
            try:
                with ThreadPoolExecutor(max(1, self.options.compile_workers)) as executor:
                    builds = BuildQueue(executor)
                    room = threading.Semaphore(config.COMPILE_WINDOWS_IN_FLIGHT)
                    window_size = max(1, self.options.batch_size) * max(1, self.options.compile_workers)
                    for number in itertools.count():
                        while not stop.is_set() and not room.acquire(timeout=0.5):
                            continue
                        if stop.is_set() or (window := read_window(source, window_size, prewarm)) is None:
                            break
                        if not window:  # an engine's input closed a window it had not begun
                            room.release()
                            continue
                        milestones.mark("first_window_received")
                        thread = threading.Thread(target=compile_window, args=(window, number, builds, room),
                                                  daemon=True, name=f"ka-window-{number}")  # fmt: skip
                        thread.start()
                        compiling.append(thread)
                    for thread in compiling:  # every rebuild queued and ended before the pool stops taking them
                        thread.join()
            except BaseException as exc:  # noqa: BLE001 - surfaced by stream() in the caller's thread
                records.put(exc)
            finally:
                for thread in compiling:
                    thread.join()
                for _ in range(workers):
                    offer(_DONE)

        def evaluate(device_index: int) -> None:
            options = replace(self.options, device_index=device_index)
            finishing: list = []
            try:
                cache_root = options.build_cache_dir or default_cache_dir()
                cache_root.mkdir(parents=True, exist_ok=True)  # before the pool: its children bind it as it is now
                wait = options.refill_after_first_reference
                wait = config.EVAL_REFILL_AFTER_FIRST_REFERENCE if wait is None else wait
                pool = EvalPool(options.prestart, options.backend == "cuda", child_env(options), options.isolation,
                                options.child_module, [cache_root, config.TASKS_DIR], options.fork_children,
                                self.references.first_ended if wait else None)  # fmt: skip
                pools.append(pool)
                with pool:
                    while (item := work.get()) is not _DONE:
                        (candidate, task), compiled = item
                        usable = compiled.ok and pool.covers([task.path.parent, compiled.library_path])
                        usable = usable and work_queues.fitting(candidate, options) is options
                        milestones.mark("first_build_taken")
                        pooled = pool.take() if usable else None
                        evaluated = start_evaluation(
                            compiled, candidate, task, options, pooled, self.references, preflight.confirm
                        )
                        milestones.mark("first_evaluation_returned")
                        if needs_baseline(evaluated) or options.profile:
                            # Waiting for the task's baseline (or profiling) need not hold this worker up.
                            finishing.append(finishers.submit(finish, evaluated))
                        else:
                            records.put(finish_record(evaluated, self.baselines))
            except BaseException as exc:  # noqa: BLE001
                records.put(exc)
            finally:
                for future in finishing:  # this worker's records all out before it says it is done
                    try:
                        future.result()
                    except BaseException as exc:  # noqa: BLE001
                        records.put(exc)
                records.put(_DONE)

        def finish(evaluated: Evaluated) -> None:
            records.put(finish_record(evaluated, self.baselines))

        pools: list[EvalPool] = []
        threads = [threading.Thread(target=produce, daemon=True)]
        devices = self._devices()
        threads += [threading.Thread(target=evaluate, args=(i % devices,), daemon=True) for i in range(workers)]
        for thread in threads:
            thread.start()
        finished = 0
        try:
            while finished < workers:
                item = records.get()
                if item is _DONE:
                    finished += 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    milestones.mark("first_record")
                    yield item
        finally:
            stop.set()
            while True:  # unblock a producer waiting on a full queue
                try:
                    work.get_nowait()
                except queue.Empty:
                    break
            for _ in range(workers):  # and let idle evaluation workers finish
                try:
                    work.put_nowait(_DONE)
                except queue.Full:
                    break
            for pool in pools:  # pre-started children must not outlive the stream
                pool.close()
            warmers.shutdown(wait=False, cancel_futures=True)
            finishers.shutdown(wait=False, cancel_futures=True)
            reference_warmers.shutdown(wait=False, cancel_futures=True)
            started = time.monotonic()
            for thread in threads:
                thread.join(timeout=max(0.1, config.SANDBOX_KILL_GRACE_S - (time.monotonic() - started)))
