"""PyTorch eager and torch.compile baselines of a task, timed exactly like candidates (child mode
"baseline"). The parent caches the result per task per build.

torch.compile uses inductor in its default mode; a failure to compile (no C++ compiler, an unsupported
op, a crash inside inductor) leaves `compile_ms` null with `compile_error` saying why, never a failed
build. Everything before the timing (task load, input sets, torch.compile's build) runs before the child asks
for the device (`ready`); the parent answers once the device is the baselines' alone (device_gate).
"""

from __future__ import annotations

from typing import Any

from builder.verify.child.failures import exception_text
from builder.verify.child.timing import TimingMismatch, build_input_sets, measure
from builder.verify.protocol.compare import snapshot, sync
from builder.verify.protocol.plan import job_counts, timing_seeds


def _sets(task_module: Any, job: dict[str, Any], device: str, wrap) -> list[Any]:
    """The rotating input sets, each calling `wrap(model)`, with the task's own outputs as references."""
    return build_input_sets(task_module, timing_seeds(job), device, lambda model, seed: wrap(model))


def _first_calls(sets: list[Any], device: str) -> None:
    """One call per set now: torch.compile traces and builds here, before the device is asked for, so the
    exclusive hold covers the timing alone."""
    import torch

    with torch.no_grad():
        for input_set in sets:
            input_set.call(*snapshot(input_set.inputs))
    sync(device)


def run_baselines(task_module: Any, job: dict[str, Any]) -> dict[str, Any]:
    """{"status", "eager_ms", "compile_ms", "eager_runtime", "compile_runtime", "compile_error", ...}."""
    import torch

    device = "cuda" if job.get("backend") == "cuda" else "cpu"
    result: dict[str, Any] = {"status": "correct", "error": None, "eager_ms": None, "compile_ms": None,
                              "eager_runtime": None, "compile_runtime": None, "compile_error": None}  # fmt: skip
    try:
        eager_sets = _sets(task_module, job, device, lambda model: model)
    except Exception as exc:  # noqa: BLE001 - the task itself fails: nothing to compare kernels with
        result.update(status="runtime_error", error=f"eager baseline failed: {exception_text(exc)}")
        return result
    compiled_sets = None
    try:
        torch._dynamo.reset()
        compiled_sets = _sets(task_module, job, device, lambda model: torch.compile(model))
        _first_calls(compiled_sets, device)
    except Exception as exc:  # noqa: BLE001 - inductor failures are recorded, not raised
        result["compile_error"] = f"torch.compile failed: {exception_text(exc)}"
    from builder.verify.child.words import await_turn

    await_turn(job, "go_path")  # set up: time once the parent owns the device for the baselines
    try:
        eager = measure(eager_sets, device, atol=float(job["atol"]), rtol=float(job["rtol"]), **job_counts(job))
    except Exception as exc:  # noqa: BLE001
        result.update(status="runtime_error", error=f"eager baseline failed: {exception_text(exc)}")
        return result
    result.update(eager_ms=eager["runtime"]["median_ms"], eager_runtime=eager["runtime"],
                  timing_method=eager["timing_method"])  # fmt: skip
    if compiled_sets is not None:
        try:
            compiled = measure(compiled_sets, device, atol=float(job["atol"]), rtol=float(job["rtol"]),
                               **job_counts(job))  # fmt: skip
        except TimingMismatch as exc:
            result["compile_error"] = f"torch.compile output differs from eager: {exc}"
        except Exception as exc:  # noqa: BLE001 - inductor failures are recorded, not raised
            result["compile_error"] = f"torch.compile failed: {exception_text(exc)}"
        else:
            result.update(compile_ms=compiled["runtime"]["median_ms"], compile_runtime=compiled["runtime"])
    result["compile_mode"] = "torch.compile(backend='inductor', mode=None)"
    import torch._inductor.config as inductor_config

    result["compile_threads"] = inductor_config.compile_threads  # how inductor built it (its worker pool)
    return result
