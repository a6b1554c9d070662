"""Profiles attached to a record when a build asks for them (trusted parent side): clang-tidy on the source,
the child's torch.profiler summary, and Nsight Compute in a sandboxed child of its own under the device's
exclusive hold (`builder.profile` does the parsing)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder import config
from builder.candidates import Candidate
from builder.tasks import Task
from builder.verify import environment
from builder.verify.compile.extension import CompileResult
from builder.verify.engine.children import build_job, run_in_turn
from schemas import KernelRecord

if TYPE_CHECKING:
    from builder.verify.options import VerifyOptions


def attach_profiles(
    record: KernelRecord, candidate: Candidate, task: Task, options: VerifyOptions, compiled: CompileResult
) -> KernelRecord:
    """clang-tidy (parent, reads text), the child's torch.profiler summary and Nsight Compute (a
    sandboxed child under ncu, correct CUDA kernels only) through builder.profile, when asked for.
    A missing or failing profiler leaves {"error": reason}, never a failed record."""
    if not options.profile:
        return record
    try:
        from builder.profile import profile_record_fields
    except ImportError as exc:  # written by another module owner; its absence must not fail a build
        record.clang_tidy = json.dumps({"error": f"profiling unavailable: {exc}"})
        return record
    torch_profile = None
    if record.torch_profile:
        try:
            torch_profile = json.loads(record.torch_profile)
        except ValueError:
            torch_profile = None
    arch = environment.gpu_arch(options.device_index) if options.backend == "cuda" else None
    scratch = Path(tempfile.mkdtemp(prefix=config.SCRATCH_PREFIXES["profiling"]))
    try:
        ncu_kwargs = _run_ncu(record, candidate, task, options, compiled, scratch)
        fields = profile_record_fields(
            candidate.source,
            candidate.language,
            backend=options.backend,
            torch_profile=torch_profile,
            arch=arch,
            **ncu_kwargs,
        )
    except Exception as exc:  # noqa: BLE001 - a profiler never fails a build
        fields = {"clang_tidy": json.dumps({"error": f"profiling failed: {type(exc).__name__}: {exc}"[:4096]})}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for name, value in fields.items():
        if name == "torch_own_fraction" and value is None:
            continue  # keep the child's own-kernel fraction from the evaluation
        if hasattr(record, name):
            setattr(record, name, value)
    return record


def _run_ncu(
    record: KernelRecord,
    candidate: Candidate,
    task: Task,
    options: VerifyOptions,
    compiled: CompileResult,
    scratch: Path,
) -> dict[str, Any]:
    """Run the candidate under Nsight Compute in a sandboxed child; the keyword arguments that tell
    profile_record_fields what happened (the report is parsed before `scratch` is removed)."""
    if options.backend != "cuda":
        return {}
    if record.status != "correct" or not compiled.ok:
        return {"ncu_error": f"not profiled: status {record.status}"}
    from builder.profile import ncu

    if ncu.ncu_available() is None:
        return {}
    report = scratch / "profile.ncu-rep"
    job = build_job(task, candidate, compiled, options, "ncu", scratch)
    # The profiled range's replays disturb, and are disturbed: they own the device. The child's start-up under
    # ncu runs beside everything (no candidate code, no device work); loading the candidate, its first call and
    # the range are its turn, it is a member from then to its exit, and ncu writes its report after the turn.
    _, outcome = run_in_turn(job, scratch, options, config.NCU_TIMEOUT_S, "ncu", exclusive=True,
                             ends_turn_itself=True, argv_prefix=ncu.ncu_argv(str(report)))  # fmt: skip
    return {
        "ncu_report_path": report,
        "ncu_timed_out": outcome.timed_out,
        "ncu_returncode": outcome.returncode,
        "ncu_stderr_tail": outcome.stderr_tail,
    }
