"""Which code did the work of one candidate call: its own kernels or PyTorch's (untrusted child side).

One call runs under `torch.profiler`. On CUDA every device kernel is classified by name as a library
kernel (ATen, cuBLAS, cuDNN, CUTLASS, Triton, memcpy/memset: builder.profile.kernel_names) or the
candidate's own, and the shares of device time decide. On the CPU there are no device kernels: the
top-level ATen compute ops called inside the candidate (allocation and view ops excepted,
config.CPU_ALLOWED_ATEN_OPS) are timed against the whole call. Library work above
config.TORCH_OPS_DOMINANT_FRACTION means `uses_torch_ops`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from builder import config
from builder.profile import kernel_names


def is_library_kernel(name: str) -> bool:
    # One classifier for the verifier, the torch profile and ncu (a substring rule such as "gemm" would
    # call a candidate's own `gemm_tiled` kernel library code and flag an honest kernel uses_torch_ops).
    return kernel_names.is_library_kernel(name)


def _summarise(rows: dict[str, list[float]], library: Callable[[str], bool]) -> list[dict[str, Any]]:
    listed = sorted(rows.items(), key=lambda item: -item[1][1])[: config.KERNELS_SEEN_MAX]
    return [
        {"name": name[:300], "calls": int(calls), "time_us": round(total, 3), "library": library(name)}
        for name, (calls, total) in listed
    ]


def _cuda_census(events: list[Any]) -> dict[str, Any]:
    from torch.autograd import DeviceType

    rows: dict[str, list[float]] = {}
    own_us = library_us = 0.0
    for event in events:
        if event.device_type != DeviceType.CUDA:
            continue
        duration = float(event.time_range.elapsed_us())
        row = rows.setdefault(event.name, [0, 0.0])
        row[0] += 1
        row[1] += duration
        if is_library_kernel(event.name):
            library_us += duration
        else:
            own_us += duration
    total = own_us + library_us
    return {
        "method": "torch.profiler CUDA kernels classified by name",
        "own_us": round(own_us, 3),
        "library_us": round(library_us, 3),
        "own_kernel_fraction": own_us / total if total > 0 else None,
        "library_fraction": library_us / total if total > 0 else 0.0,
        "kernels_seen": _summarise(rows, is_library_kernel),
    }


def _cpu_census(events: list[Any], wall_us: float) -> dict[str, Any]:
    allowed = set(config.CPU_ALLOWED_ATEN_OPS)
    rows: dict[str, list[float]] = {}
    library_us = 0.0
    for event in events:
        if event.cpu_parent is not None:  # nested ops are inside a top-level op's time already
            continue
        duration = float(event.cpu_time_total)
        row = rows.setdefault(event.name, [0, 0.0])
        row[0] += 1
        row[1] += duration
        if event.name.startswith("aten::") and event.name not in allowed:
            library_us += duration
    library_fraction = min(1.0, library_us / wall_us) if wall_us > 0 else 0.0
    return {
        "method": "torch.profiler top-level ATen ops vs wall time of the call",
        "wall_us": round(wall_us, 3),
        "library_us": round(library_us, 3),
        "own_kernel_fraction": 1.0 - library_fraction,
        "library_fraction": library_fraction,
        "kernels_seen": _summarise(rows, lambda name: name.startswith("aten::") and name not in allowed),
    }


def census(call: Callable[[], Any], device: str) -> dict[str, Any]:
    """Profile one call; returns own_kernel_fraction, library_fraction, kernels_seen, uses_torch_ops."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    summaries = []
    # On the CPU the share is ATen time over wall time, and a busy machine only ever inflates the wall
    # time: the largest share over a few calls is the honest estimate. Device time needs one call.
    for _ in range(1 if device == "cuda" else config.CPU_CENSUS_CALLS):
        with profile(activities=activities) as prof:
            start = time.perf_counter()
            call()
            if device == "cuda":
                torch.cuda.synchronize()
            wall_us = (time.perf_counter() - start) * 1e6
        events = list(prof.events())
        summaries.append(_cuda_census(events) if device == "cuda" else _cpu_census(events, wall_us))
    summary = max(summaries, key=lambda item: item["library_fraction"])
    summary["uses_torch_ops"] = summary["library_fraction"] > config.TORCH_OPS_DOMINANT_FRACTION
    return summary
