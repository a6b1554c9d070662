"""One kernel's way through the engine (trusted parent side): compiled (or its build recalled), evaluated in a fresh
sandboxed child and judged against the task's clean reference (`start_evaluation`), then its record assembled once
the task's baseline is in (`finish_record`). Candidate code never runs in this process: compilation happens in
`child/build.py`, evaluation in `child/main.py`, both sandboxed; this module writes job files, reads result files
(untrusted input) and turns them into records (`judge/verdict.py`).
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from builder import config
from builder.candidates import Candidate
from builder.tasks import Task
from builder.verify import environment
from builder.verify.compile.extension import CompileResult, build_extension, recall_build
from builder.verify.engine import work_queues
from builder.verify.engine.baseline_cache import (
    BaselineCache,
    eager_disagrees,
    eager_slowed_reason,
    held_to_clean_eager,
    weigh_slowed_eager,
)
from builder.verify.engine.children import build_job
from builder.verify.engine.clean_reference import ReferenceCache, process_reference_cache
from builder.verify.engine.evaluation import run_judged
from builder.verify.engine.infrastructure import Confirm, InfrastructureFailure, machinery_fails
from builder.verify.engine.profiling import attach_profiles
from builder.verify.judge import floor, static_scan, verdict
from builder.verify.judge.extension_symbols import symbol_notes
from builder.verify.options import VerifyOptions
from builder.verify.sandbox.pool import PooledChild
from builder.verify.sandbox.process import resolve_isolation
from builder.verify.sandbox.suspects import child_suspect, suspect_text
from schemas import KernelRecord

log = logging.getLogger("builder.verify.engine.verifier")  # the engine's logger: where the bench listens


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
    # The same kernel evaluated once more in a fresh child (`finish_record`'s second look where eager timed in the
    # window was slowed on CUDA); None once it was taken.
    again: Callable[[], Evaluated] | None = None
    slowed_before: str | None = None  # why the first look's eager counted as slowed, on the second look's Evaluated


def start_evaluation(compiled: CompileResult, candidate: Candidate, task: Task, options: VerifyOptions,
                     pooled: PooledChild | None = None, references: ReferenceCache | None = None,
                     confirm: Confirm | None = None) -> Evaluated:  # fmt: skip
    """`evaluate_compiled` up to the baseline: the child run and judged, its child and scratch gone. `confirm`
    runs the control kernel where a failure looks like the machinery's (`preflight.confirm`); without it, or with
    `options.suspects_are_own`, every failure is the candidate's own (the control kernel's run itself)."""
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
        if (why := machinery_fails(compiled.infrastructure, options, began, confirm)) is not None:
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
    # Where a failure looks like the machinery's and the control passes now, the candidate is evaluated once more
    # in a fresh child (its reference computed again where that failed), and what that gives is its own.
    once_more_as_own = functools.partial(start_evaluation, compiled, candidate, task,
                                         replace(options, suspects_are_own=True), None, references, confirm)  # fmt: skip
    cache = references or process_reference_cache()
    reference = cache.get(task, options)
    if reference.error:  # the task's reference failed in a clean process: nothing to judge against
        if pooled is not None:
            pooled.discard()
        suspect = None if options.suspects_are_own else suspect_text(reference.error)
        if suspect and (why := machinery_fails(suspect, options, time.monotonic() - reference.compute_s, confirm)):
            return Evaluated(candidate=candidate, task=task, options=options, infrastructure=why)
        if suspect:  # the failed reference was not kept: computed once more
            return once_more_as_own()
        record = verdict.assemble_record(base, status="runtime_error", error=reference.error,
                                         static_notes=static_notes, extra=extra)  # fmt: skip
        return Evaluated(record=attach_profiles(record, candidate, task, options, compiled))
    extra["floor_ms"] = floor.record_floor(reference.manifest, options.backend, options.device_index)
    prefix = config.SCRATCH_PREFIXES["evaluation"]
    scratch = pooled.scratch if pooled is not None else Path(tempfile.mkdtemp(prefix=prefix))
    with cache.room.reserved(cache.scratch_bytes(reference)):  # its outputs never find the disk full
        try:
            job = build_job(task, candidate, compiled, options, "evaluate", scratch)
            result, outcome = run_judged(job, scratch, options, reference, pooled)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    if work_queues.queues(options) and work_queues.spanned_streams(result):
        log.info("%s ran work on several streams: evaluated again with the driver's work queues", candidate.kernel_name)
        return start_evaluation(
            compiled, candidate, task, work_queues.driver_default(options), None, references, confirm
        )
    suspect = None if options.suspects_are_own else child_suspect(outcome, result)
    if suspect and (why := machinery_fails(suspect, options, time.monotonic() - outcome.wall_s, confirm)):
        return Evaluated(candidate=candidate, task=task, options=options, infrastructure=why)
    if suspect:
        # The failure may have been the machinery's for a while (a disk that others' files filled, then freed). A
        # candidate that only prints such a line gains one more evaluation.
        log.info("%s: %s; the control kernel passes: evaluated once more", candidate.kernel_name, suspect)
        return once_more_as_own()
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
    again = functools.partial(start_evaluation, compiled, candidate, task, options, None, references, confirm)
    return Evaluated(candidate=candidate, task=task, options=options, compiled=compiled, base=base, extra=extra,
                     static_notes=static_notes, status=status, error=error, result=result, again=again)  # fmt: skip


def needs_baseline(evaluated: Evaluated) -> bool:
    """A correct kernel's record carries its task's baseline (torch.compile's time, the clean eager)."""
    runtime = (evaluated.result or {}).get("runtime")
    return evaluated.status == "correct" and isinstance(runtime, dict) and bool(runtime.get("median_ms"))


def finish_record(evaluated: Evaluated, baselines: BaselineCache | None = None,
                  verdict_only: bool = False) -> KernelRecord | InfrastructureFailure:  # fmt: skip
    """The record of a started evaluation: waits for the task's baseline where it needs one (measured early,
    in parallel: `BaselineCache.prewarm`), then profiles. `Verifier.stream` runs it off the evaluation worker,
    which goes on to its next candidate meanwhile. Where the machinery failed, no record: what failed.
    `verdict_only`: neither baseline nor profiles (the control kernel's record, of which only the verdict is asked)."""
    if evaluated.record is not None:
        return evaluated.record
    if evaluated.infrastructure is not None:
        assert evaluated.candidate is not None and evaluated.task is not None
        return InfrastructureFailure(evaluated.candidate, evaluated.task, evaluated.infrastructure)
    assert evaluated.options is not None and evaluated.task is not None and evaluated.candidate is not None
    options, task, result = evaluated.options, evaluated.task, evaluated.result
    baseline, waited = None, time.monotonic()
    if needs_baseline(evaluated) and not verdict_only:
        baselines = baselines or BaselineCache(options.baseline_cache_dir)
        baseline = baselines.get(task, options)
        if eager_disagrees(result or {}, baseline):  # the machine changed since the baseline was cached: again
            baseline = baselines.get(task, options, refresh=True) or baseline
        if slowed := eager_slowed_reason(result or {}, baseline, options.backend):  # still slower than clean
            if options.backend == "cuda" and evaluated.again is not None:
                return _second_look(evaluated, slowed, baselines)
            if evaluated.slowed_before:
                slowed = f"{slowed}; in the first evaluation, {evaluated.slowed_before}"
            result, evaluated.status, evaluated.error = weigh_slowed_eager(result or {}, slowed, options.backend)
        else:
            result = held_to_clean_eager(result or {}, baseline)
    if result is not None and isinstance(result.get("phase_s"), dict):
        phases = {**result["phase_s"], "parent_wait_for_baseline": round(time.monotonic() - waited, 4)}
        log.debug("evaluation phases of %s: %s", evaluated.candidate.kernel_name, json.dumps(phases))
        if phases.get("digest_on_device") == 0.0:
            _say_digests_on_the_host()
    record = verdict.assemble_record(evaluated.base, status=evaluated.status, error=evaluated.error, result=result,
                                     static_notes=evaluated.static_notes, baseline=baseline, extra=evaluated.extra)  # fmt: skip
    assert evaluated.compiled is not None
    return record if verdict_only else attach_profiles(record, evaluated.candidate, task, options, evaluated.compiled)


def _second_look(first: Evaluated, slowed: str, baselines: BaselineCache) -> KernelRecord | InfrastructureFailure:
    """The record of a CUDA kernel whose window timed PyTorch eager slower than a clean process did: evaluated again
    in a fresh child, and that evaluation's record kept, disqualified (`slowed_baseline`) where its eager is slowed
    too. A candidate that slows eager in its own process does so in every child it gets; an honest one whose window
    met load from elsewhere (a launch-bound baseline of a few microseconds, host threads contending) rarely meets
    it twice. Nothing of the first look counts towards the second's figures."""
    assert first.again is not None and first.candidate is not None
    log.info("%s: PyTorch eager was slowed in its window (%s): evaluated again in a fresh child",
             first.candidate.kernel_name, slowed)  # fmt: skip
    second = first.again()
    second.again, second.slowed_before = None, slowed
    if second.result is not None and second.status == "correct":
        told = f"; {config.SECOND_LOOK_CLAUSE}, each in a fresh child: the first window's PyTorch eager was slowed"
        told += f" ({slowed})"
        second.result = {**second.result, "timing_method": f"{second.result.get('timing_method') or ''}{told}"}
    return finish_record(second, baselines)


@functools.cache
def _say_digests_on_the_host() -> None:
    """Once a process: a child that could not hash its outputs on the device hashed them on its host (the same
    digests and verdicts, each timed output copied over: windows several times as long; docs/architecture.md)."""
    log.warning("a timing child hashed its outputs on the host, not the device (NVRTC or the digest kernel's check "
                "failed there): the same verdicts, but its timing windows run several times as long")  # fmt: skip
