"""Verification engine, trusted parent side: compile, evaluate in a fresh sandboxed child, assemble records.

Candidate code never runs in this process: compilation happens in `compile_child`, evaluation in
`child`, both under `sandbox.run_sandboxed`. This module only writes job files, reads result files
(treated as untrusted input) and turns them into records (`verdict.assemble_record`).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from builder import config
from builder.candidates import Candidate
from builder.errors import InfrastructureError
from builder.tasks import Task
from builder.verify.compile import batching
from builder.verify.engine import device_engines, work_queues
from builder.verify import environment, milestones
from builder.verify.judge import floor, static_scan, verdict
from builder.verify.engine.baseline_cache import BaselineCache, eager_disagrees, eager_slowed_reason, weigh_slowed_eager
from builder.verify.compile.build_queue import BuildQueue
from builder.verify.engine.clean_reference import ReferenceCache, process_reference_cache
from builder.verify.compile.extension import CompileResult, build_extension, default_cache_dir, recall_build, remember_members
from builder.verify.engine.evaluation import run_judged
from builder.verify.judge.extension_symbols import symbol_notes
from builder.verify.engine.hand_back import UnstartedWork, read_window
from builder.verify.engine.infrastructure import InfrastructureFailure, child_suspect, machinery_fails, suspect_text
from builder.verify.options import VerifyOptions
from builder.verify.sandbox.pool import EvalPool, PooledChild, build_job, child_env
from builder.verify.engine.profiling import attach_profiles
from builder.verify.sandbox.process import resolve_isolation
from schemas import KernelRecord

log = logging.getLogger(__name__)


def build_settings(options: VerifyOptions) -> dict[str, Any]:
    """Where builds live and what, besides a source and the backend, keys them (`compile.build_key`)."""
    return {"cache_dir": options.build_cache_dir, "fast_math": options.fast_math, "device_index": options.device_index}


def compile_candidate(candidate: Candidate, task: Task, options: VerifyOptions) -> CompileResult:
    """Compile one candidate alone, or find its earlier build (its own, or a shared one it was in). Python
    candidates need no build."""
    if candidate.language == "python":
        return CompileResult(ok=True)
    settings = build_settings(options)
    return recall_build(candidate.source, candidate.language, options.backend, **settings) or build_extension(
        candidate.source, candidate.language, options.backend, **settings, timeout_s=options.compile_timeout_s,
        isolation=options.isolation)  # fmt: skip


def _static_notes(candidate: Candidate, compiled: CompileResult) -> dict[str, str]:
    """The flags the parent finds itself, each with what showed it: the source text and the built extension's
    imports (library use past the dispatcher, which the child's profiler never sees)."""
    notes = static_scan.scan_notes(candidate.source, candidate.language)
    for flag, why in symbol_notes(compiled, candidate.source, candidate.language).items():
        notes[flag] = f"{notes[flag]}; {why}" if flag in notes else why
    known = verdict.known_flags(list(notes))
    return {flag: why for flag, why in notes.items() if flag in known}


def _extra_fields(options: VerifyOptions, task: Task) -> dict[str, Any]:
    atol, rtol = task.tolerances()
    extra = environment.environment_fields(options.backend, options.device_index)
    extra.update(atol=options.atol if options.atol is not None else atol,
                 rtol=options.rtol if options.rtol is not None else rtol,
                 seeds=list(options.seeds or []), isolation=resolve_isolation(options.isolation))  # fmt: skip
    return extra


@dataclass
class Evaluated:
    """A candidate's evaluation up to its record: the record itself where nothing is left to wait for, else what
    `finish_record` needs (the baseline is the task's, and may still be being measured)."""

    record: KernelRecord | None = None
    candidate: Candidate | None = None
    task: Task | None = None
    options: VerifyOptions | None = None
    compiled: CompileResult | None = None
    base: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    static_notes: dict[str, str] = field(default_factory=dict)
    status: str = ""
    error: str | None = None
    result: dict[str, Any] | None = None
    infrastructure: str | None = None  # the machinery failed (control confirmed): no record, no verdict


def evaluate_compiled(compiled: CompileResult, candidate: Candidate, task: Task, options: VerifyOptions,
                      pooled: PooledChild | None = None, baselines: BaselineCache | None = None,
                      references: ReferenceCache | None = None) -> KernelRecord | InfrastructureFailure:  # fmt: skip
    """Evaluate a compiled candidate in a fresh sandboxed child, judge it against the task's clean reference
    (computed once per task by `references`) and assemble its record."""
    return finish_record(start_evaluation(compiled, candidate, task, options, pooled, references), baselines)


def start_evaluation(compiled: CompileResult, candidate: Candidate, task: Task, options: VerifyOptions,
                     pooled: PooledChild | None = None, references: ReferenceCache | None = None) -> Evaluated:  # fmt: skip
    """`evaluate_compiled` up to the baseline: the child run and judged, its child and scratch gone."""
    options = options.with_seeds()
    base = verdict.base_fields(candidate, task, options.backend)
    extra = _extra_fields(options, task)
    extra["compile_s"] = compiled.compile_s
    static_notes = _static_notes(candidate, compiled)
    fitted = work_queues.fitting(candidate, options)
    if fitted is not options and pooled is not None:
        pooled.discard()  # started with fewer queues than this candidate's streams may need
        pooled = None
    options = fitted
    if not compiled.ok and compiled.infrastructure and not options.suspects_are_own:
        began = time.monotonic() - compiled.compile_s
        if (why := machinery_fails(compiled.infrastructure, options, began)) is not None:
            if pooled is not None:
                pooled.discard()
            return Evaluated(candidate=candidate, task=task, options=options, infrastructure=why)
        # The control compiles: built once more, alone, and what that gives is the candidate's own.
        compiled = compile_candidate(candidate, task, replace(options, suspects_are_own=True))
    if not compiled.ok:
        if pooled is not None:
            pooled.discard()
        status = "timeout" if compiled.timed_out else "compile_error"
        record = verdict.assemble_record(base, status=status, error=compiled.error, static_notes=static_notes,
                                         extra=extra)  # fmt: skip
        return Evaluated(record=attach_profiles(record, candidate, task, options, compiled))
    reference = (references or process_reference_cache()).get(task, options)
    if reference.error:  # the task's reference failed in a clean process: nothing to judge against
        if pooled is not None:
            pooled.discard()
        suspect = None if options.suspects_are_own else suspect_text(reference.error)
        if suspect and (why := machinery_fails(suspect, options, time.monotonic() - reference.compute_s)):
            return Evaluated(candidate=candidate, task=task, options=options, infrastructure=why)
        record = verdict.assemble_record(base, status="runtime_error", error=reference.error,
                                         static_notes=static_notes, extra=extra)  # fmt: skip
        return Evaluated(record=attach_profiles(record, candidate, task, options, compiled))
    extra["floor_ms"] = floor.record_floor(reference.manifest, options.backend, options.device_index)
    prefix = config.SCRATCH_PREFIXES["evaluation"]
    scratch = pooled.scratch if pooled is not None else Path(tempfile.mkdtemp(prefix=prefix))
    try:
        job = build_job(task, candidate, compiled, options, "evaluate", scratch)
        result, outcome = run_judged(job, scratch, options, reference, pooled)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if work_queues.queues(options) and work_queues.spanned_streams(result):
        log.info("%s ran work on several streams: evaluated again with the driver's work queues", candidate.kernel_name)
        return start_evaluation(compiled, candidate, task, work_queues.driver_default(options), None, references)
    suspect = None if options.suspects_are_own else child_suspect(outcome, result)
    if suspect and (why := machinery_fails(suspect, options, time.monotonic() - outcome.wall_s)):
        return Evaluated(candidate=candidate, task=task, options=options, infrastructure=why)
    extra["device_connections"] = work_queues.queues(options)
    extra["eval_s"] = outcome.wall_s
    extra["isolation"] = outcome.isolation
    if outcome.timed_out:
        error = f"evaluation timed out after {options.timeout_s:g} s; process group killed"
        status, result = "timeout", None
    elif result is None:
        tail = outcome.stderr_tail.strip()
        status, error = "crash", f"child ended without a result ({outcome.describe()}); stderr tail:\n{tail}"
    else:
        status, error = str(result.get("status")), result.get("error")
    return Evaluated(candidate=candidate, task=task, options=options, compiled=compiled, base=base, extra=extra,
                     static_notes=static_notes, status=status, error=error, result=result)  # fmt: skip


def needs_baseline(evaluated: Evaluated) -> bool:
    """A correct kernel's record carries its task's baseline (torch.compile's time, the clean eager)."""
    runtime = (evaluated.result or {}).get("runtime")
    return evaluated.status == "correct" and isinstance(runtime, dict) and bool(runtime.get("median_ms"))


def finish_record(evaluated: Evaluated, baselines: BaselineCache | None = None) -> KernelRecord | InfrastructureFailure:
    """The record of a started evaluation: waits for the task's baseline where it needs one (measured early,
    in parallel: `BaselineCache.prewarm`), then profiles. `Verifier.stream` runs it off the evaluation worker,
    which goes on to its next candidate meanwhile. Where the machinery failed, no record: what failed."""
    if evaluated.record is not None:
        return evaluated.record
    if evaluated.infrastructure is not None:
        assert evaluated.candidate is not None and evaluated.task is not None
        return InfrastructureFailure(evaluated.candidate, evaluated.task, evaluated.infrastructure)
    assert evaluated.options is not None and evaluated.task is not None and evaluated.candidate is not None
    options, task, result = evaluated.options, evaluated.task, evaluated.result
    baseline, waited = None, time.monotonic()
    if needs_baseline(evaluated):
        baselines = baselines or BaselineCache(options.baseline_cache_dir)
        baseline = baselines.get(task, options)
        if eager_disagrees(result or {}, baseline):  # the machine changed since the baseline was cached: again
            baseline = baselines.get(task, options, refresh=True) or baseline
        if slowed := eager_slowed_reason(result or {}, baseline, options.backend):  # still slower than clean
            result, evaluated.status, evaluated.error = weigh_slowed_eager(result or {}, slowed, options.backend)
    if result is not None and isinstance(result.get("phase_s"), dict):
        phases = {**result["phase_s"], "parent_wait_for_baseline": round(time.monotonic() - waited, 4)}
        log.debug("evaluation phases of %s: %s", evaluated.candidate.kernel_name, json.dumps(phases))
    record = verdict.assemble_record(evaluated.base, status=evaluated.status, error=evaluated.error, result=result,
                                     static_notes=evaluated.static_notes, baseline=baseline, extra=evaluated.extra)  # fmt: skip
    assert evaluated.compiled is not None
    return attach_profiles(record, evaluated.candidate, task, options, evaluated.compiled)


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
        from builder.verify.engine.preflight import preflight

        preflight(self.options)

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
                        evaluated = start_evaluation(compiled, candidate, task, options, pooled, self.references)
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
