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

_GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch")


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


def _cuda_census(events: list[Any], current: set[Any]) -> dict[str, Any]:
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
        **_concurrency(events, current),
    }


def _device_streams(events: list[Any]) -> set[Any]:
    from torch.autograd import DeviceType

    found = {getattr(e, "device_resource_id", None) for e in events if e.device_type == DeviceType.CUDA}
    return found - {None}


def _concurrency(events: list[Any], current: set[Any]) -> dict[str, int]:
    """The streams the call's device work ran on, how many of them are not the stream it was called on
    (`current`: where a marker of ours ran), and its CUDA graph launches (runtime or driver API calls): a
    candidate whose work leaves its stream is evaluated again with the driver's work queues (`work_queues.py`)."""
    from torch.autograd import DeviceType

    streams = _device_streams(events)
    launches = sum(1 for e in events if e.device_type != DeviceType.CUDA and e.name.startswith(_GRAPH_LAUNCHES))
    others = len(streams - current) if current else 0  # no marker seen: the count of streams alone decides
    return {"streams": len(streams), "other_streams": others, "graph_launches": launches}


def _current_stream(activities: list[Any]) -> set[Any]:
    """The profiler's id of the current stream: a profiled fill of one element (ids are stable in a context)."""
    import torch
    from torch.profiler import profile

    with profile(activities=activities) as prof:
        torch.empty(1, device="cuda").fill_(0.0)
        torch.cuda.synchronize()
    return _device_streams(list(prof.events()))


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
    current = _current_stream(activities) if device == "cuda" else set()
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
        summaries.append(_cuda_census(events, current) if device == "cuda" else _cpu_census(events, wall_us))
    summary = max(summaries, key=lambda item: item["library_fraction"])
    summary["uses_torch_ops"] = summary["library_fraction"] > config.TORCH_OPS_DOMINANT_FRACTION
    return summary
