"""torch.profiler summary of ONE call of a candidate. Runs inside the sandbox child.

The child calls `profile_call(lambda: model(*inputs, fn=forward), device)` after its correctness
checks when the job has `profile: true`, and stores the returned dict in the result JSON's
`torch_profile` (its `own_fraction` is also the result's `own_kernel_fraction`).

Own-vs-library time:
- CUDA: device time of the candidate's own kernels over all kernel device time, classified by
  `kernel_names.is_library_kernel` (ATen, cuBLAS, cuDNN, CUTLASS, memcpy/memset are library).
- CPU: the call runs inside a `record_function` range named config.NVTX_CANDIDATE_RANGE; the range's self
  CPU time (time not spent inside any profiled ATen op) over its total CPU time is the candidate's
  own share. Python glue around the call counts as "own" too; for an extension call it is tiny.

Output (bounded to config.TORCH_PROFILE_TOP rows per table, times in microseconds, memory in bytes):
    {"tool": "torch.profiler", "torch_version", "device", "activities", "wall_ms",
     "operators": [{name, count, self_cpu_us, cpu_total_us, self_device_us, device_total_us,
                    cpu_memory_bytes, device_memory_bytes}],          # top by self CPU time
     "operators_by_device": [...],                                    # top by self device time (CUDA)
     "kernels": [{name, count, device_us, library}],                  # top by device time (CUDA)
     "totals": {"self_cpu_us", "device_us", "own_device_us", "library_device_us"},
     "own_fraction": float|None, "own_fraction_basis": "device_time"|"cpu_time"}
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from builder import config
from builder.profile.kernel_names import is_library_kernel


def _attr(event: Any, *names: str, default: float = 0.0) -> float:
    """First present attribute among `names` (torch renamed cuda_* to device_* across versions)."""
    for name in names:
        value = getattr(event, name, None)
        if value is not None:
            return float(value)
    return default


def _is_device_event(event: Any) -> bool:
    device_type = getattr(event, "device_type", None)
    return device_type is not None and str(device_type).split(".")[-1] in ("CUDA", "PrivateUse1", "MTIA")


def _operator_row(event: Any) -> dict:
    return {
        "name": event.key,
        "count": int(event.count),
        "self_cpu_us": round(_attr(event, "self_cpu_time_total"), 3),
        "cpu_total_us": round(_attr(event, "cpu_time_total"), 3),
        "self_device_us": round(_attr(event, "self_device_time_total", "self_cuda_time_total"), 3),
        "device_total_us": round(_attr(event, "device_time_total", "cuda_time_total"), 3),
        "cpu_memory_bytes": int(_attr(event, "self_cpu_memory_usage", "cpu_memory_usage")),
        "device_memory_bytes": int(_attr(event, "self_device_memory_usage", "self_cuda_memory_usage")),
    }


def summarise(averages: list[Any], device: str, range_name: str = config.NVTX_CANDIDATE_RANGE) -> dict:
    """Tables and the own fraction from `prof.key_averages()` (a list of FunctionEventAvg)."""
    top = config.TORCH_PROFILE_TOP
    # The candidate's own record_function range also shows up as a device-side annotation: not a kernel.
    kernels = [e for e in averages if _is_device_event(e) and e.key != range_name]
    operators = [e for e in averages if not _is_device_event(e) and e.key != range_name]
    candidate_range = next((e for e in averages if e.key == range_name and not _is_device_event(e)), None)

    kernel_rows = [
        {
            "name": e.key,
            "count": int(e.count),
            "device_us": round(_attr(e, "self_device_time_total", "self_cuda_time_total", "device_time_total"), 3),
            "library": is_library_kernel(e.key),
        }
        for e in kernels
    ]
    kernel_rows.sort(key=lambda row: row["device_us"], reverse=True)
    own_device = sum(row["device_us"] for row in kernel_rows if not row["library"])
    library_device = sum(row["device_us"] for row in kernel_rows if row["library"])

    operator_rows = [_operator_row(e) for e in operators]
    by_cpu = sorted(operator_rows, key=lambda row: row["self_cpu_us"], reverse=True)
    by_device = sorted(
        (row for row in operator_rows if row["self_device_us"] > 0), key=lambda row: row["self_device_us"], reverse=True
    )

    own_fraction: float | None = None
    basis: str | None = None
    if device.startswith("cuda") and own_device + library_device > 0:
        own_fraction, basis = own_device / (own_device + library_device), "device_time"
    elif not device.startswith("cuda") and candidate_range is not None:
        total = _attr(candidate_range, "cpu_time_total")
        if total > 0:
            own = min(max(_attr(candidate_range, "self_cpu_time_total"), 0.0), total)
            own_fraction, basis = own / total, "cpu_time"
    return {
        "operators": by_cpu[:top],
        "operators_by_device": by_device[:top],
        "kernels": kernel_rows[:top],
        "counts": {"operators": len(operator_rows), "kernels": len(kernel_rows)},
        "totals": {
            "self_cpu_us": round(sum(row["self_cpu_us"] for row in operator_rows), 3),
            "device_us": round(own_device + library_device, 3),
            "own_device_us": round(own_device, 3),
            "library_device_us": round(library_device, 3),
        },
        "own_fraction": None if own_fraction is None else round(own_fraction, 6),
        "own_fraction_basis": basis,
    }


def profile_call(call: Callable[[], Any], device: str) -> dict:
    """Profile one `call()` on `device` ("cpu" or "cuda[:N]"); {"error": reason} if profiling fails.

    Exceptions raised by the candidate itself propagate: the child's own checks decide what a failing
    candidate means, the profiler only reports on a call that completed.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    on_cuda = device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    try:
        prof = profile(activities=activities, profile_memory=True, record_shapes=False)
        prof.__enter__()
    except Exception as exc:  # noqa: BLE001 - e.g. CUPTI unavailable: the field records why
        return {"error": f"torch.profiler could not start: {type(exc).__name__}: {exc}"}
    started = time.perf_counter()
    try:
        with record_function(config.NVTX_CANDIDATE_RANGE):
            call()
        if on_cuda:
            torch.cuda.synchronize()
    finally:
        wall_ms = (time.perf_counter() - started) * 1e3
        try:
            prof.__exit__(None, None, None)
        except Exception:  # noqa: BLE001 - a broken trace must not mask the candidate's own error
            pass
    try:
        summary = summarise(list(prof.key_averages()), device)
    except Exception as exc:  # noqa: BLE001
        return {"error": f"torch.profiler summary failed: {type(exc).__name__}: {exc}"}
    return {
        "tool": "torch.profiler",
        "torch_version": torch.__version__,
        "device": device,
        "activities": [a.name for a in activities],
        "wall_ms": round(wall_ms, 3),
        **summary,
    }
