"""PyTorch eager and torch.compile baselines of a task, timed exactly like candidates (child mode
"baseline"). The parent caches the result per task per build.

torch.compile uses inductor in its default mode; a failure to compile (no C++ compiler, an unsupported
op, a crash inside inductor) leaves `compile_ms` null with `compile_error` saying why, never a failed
build.
"""

from __future__ import annotations

from typing import Any

from builder.verify.checks import exception_text
from builder.verify.timing import TimingMismatch, build_input_sets, job_counts, measure, timing_seeds


def _time(task_module: Any, job: dict[str, Any], device: str, wrap) -> dict[str, Any]:
    """Time `wrap(model)` (a callable taking the inputs) over the rotating input sets."""
    sets = build_input_sets(task_module, timing_seeds(job), device, lambda model, seed: wrap(model))
    return measure(sets, device, atol=float(job["atol"]), rtol=float(job["rtol"]), **job_counts(job))


def _warm(task_module: Any, job: dict[str, Any], device: str) -> dict[str, Any]:
    """Compile the torch.compile baseline once, untimed: fills the build's inductor/triton caches so the
    measured baseline does not pay for code generation (the parent runs these in parallel)."""
    import torch

    from builder.tasks import instantiate

    try:
        seed = timing_seeds(job)[0]
        model, inputs = instantiate(task_module, seed, device=device)
        with torch.no_grad():
            torch.compile(model)(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - the measured run will record the failure
        return {"status": "runtime_error", "error": f"warm-up failed: {exception_text(exc)}"}
    return {"status": "correct", "error": None, "warm_only": True}


def run_baselines(task_module: Any, job: dict[str, Any]) -> dict[str, Any]:
    """{"status", "eager_ms", "compile_ms", "eager_runtime", "compile_runtime", "compile_error", ...}."""
    import torch

    device = "cuda" if job.get("backend") == "cuda" else "cpu"
    if job.get("warm_only"):
        return _warm(task_module, job, device)
    result: dict[str, Any] = {"status": "correct", "error": None, "eager_ms": None, "compile_ms": None,
                              "eager_runtime": None, "compile_runtime": None, "compile_error": None}  # fmt: skip
    try:
        eager = _time(task_module, job, device, lambda model: model)
    except Exception as exc:  # noqa: BLE001 - the task itself fails: nothing to compare kernels with
        result.update(status="runtime_error", error=f"eager baseline failed: {exception_text(exc)}")
        return result
    result.update(eager_ms=eager["runtime"]["median_ms"], eager_runtime=eager["runtime"],
                  timing_method=eager["timing_method"])  # fmt: skip
    try:
        torch._dynamo.reset()
        compiled = _time(task_module, job, device, lambda model: torch.compile(model))
    except TimingMismatch as exc:
        result["compile_error"] = f"torch.compile output differs from eager: {exc}"
    except Exception as exc:  # noqa: BLE001 - inductor failures are recorded, not raised
        result["compile_error"] = f"torch.compile failed: {exception_text(exc)}"
    else:
        result.update(compile_ms=compiled["runtime"]["median_ms"], compile_runtime=compiled["runtime"])
    result["compile_mode"] = "torch.compile(backend='inductor', mode=None)"
    return result
