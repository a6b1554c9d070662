"""A candidate's checks and the parent's judgement in this process, on trusted Python fakes: the flags of the checks
tested without a sandboxed child. Both sides run here, the clean reference first; never candidate code."""

from __future__ import annotations

from typing import Any

from builder.verify.child import tamper
from builder.verify.child.checks import run_candidate_side
from builder.verify.child.reference import compute_reference
from builder.verify.judge import outputs as judge
from builder.verify.protocol import tensor_files


def evaluate(forward: Any, task_module: Any, job: dict[str, Any]) -> dict[str, Any]:
    """The result fields (status, flags, error, diffs, ...) that a candidate's child and the parent's judge give
    `forward` on the task together."""
    bundle = compute_reference(task_module, job)
    if bundle.manifest.get("error"):
        return {"status": "runtime_error", "flags": [], "error": bundle.manifest["error"], "error_origin": "task",
                "trials": 0}  # fmt: skip
    before = tamper.fingerprint(task_module)
    run = run_candidate_side(forward, task_module, job, bundle.public_manifest())
    run.time_side_stream()
    if changed := tamper.changes(before, tamper.fingerprint(task_module)):
        run.flag("tampers_reference", "; ".join(changed))
    outputs = tensor_files.unpack(*tensor_files.pack(run.outputs))
    reference = tensor_files.unpack(*tensor_files.pack(bundle.outputs))
    return judge.judge_checks(run.result(), outputs, reference, bundle.manifest, float(job["atol"]), float(job["rtol"]))
