"""The physical floor of a CUDA kernel's runtime (trusted parent side).

A kernel must at least write its outputs and read the inputs its output depends on, and the device's DRAM moves
no more than its peak bandwidth: `floor_ms` is that many bytes at that rate. The bytes come from the clean
reference's manifest (`reference.compute_reference`: the size of every output, and of every input, parameter and
buffer whose perturbation moved the reference's output the elements the output depends on, `dependence.py`),
never from the candidate's process. The bandwidth is 2 x the memory clock x the bus width (double data rate), read
from NVML (the library nvidia-smi reads; no CUDA context in this process).

What the floor leaves out, each of which can only make it lower than the truth: inputs the output depends on
within the tolerance alone (they are not among the responsive targets), integer inputs (never perturbed), caches
(the timing flushes L2 before each call, so inputs come from DRAM), and every byte moved beyond the minimum. What
it assumes: a kernel reads every counted element and writes every output element. A kernel may still skip inputs
legally in ways the dependence test does not see (zeros of an input the task does not mask itself), and writes
still in L2 when the kernel ends need not have reached DRAM; the margin (`config.IMPLAUSIBLE_RUNTIME_FRACTION`) is
there for both.

`speed_of_light` = floor_ms / runtime_ms: 1.0 is the memory limit; a runtime below the floor by more than the
margin is `implausible_runtime` (disqualifying): the timer missed work (another stream, another process) or the
kernel did not do it.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from builder import config

NVML_CLOCK_MEM = 2  # nvmlClockType_t: NVML_CLOCK_MEM
NVML_LIBRARY = "libnvidia-ml.so.1"


def dram_bandwidth(memory_clock_mhz: float, bus_width_bits: int) -> float:
    """Peak DRAM bytes per second: two transfers per memory clock (double data rate) over the whole bus."""
    return 2.0 * memory_clock_mhz * 1e6 * bus_width_bits / 8.0


@functools.lru_cache(maxsize=8)
def peak_dram_bandwidth(gpu_id: str) -> float | None:
    """Bytes per second of GPU `gpu_id` (an nvidia-smi id: its index or UUID) from NVML's maximum memory clock and
    memory bus width; None where NVML or the GPU cannot be read."""
    try:
        nvml = ctypes.CDLL(NVML_LIBRARY)
        return _read_bandwidth(nvml, gpu_id)
    except (OSError, AttributeError):  # no NVML, or one without these calls
        return None


def _read_bandwidth(nvml: Any, gpu_id: str) -> float | None:
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        handle = ctypes.c_void_p()
        if gpu_id.isdigit():
            found = nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(int(gpu_id)), ctypes.byref(handle))
        else:
            found = nvml.nvmlDeviceGetHandleByUUID(gpu_id.encode(), ctypes.byref(handle))
        clock, width = ctypes.c_uint(), ctypes.c_uint()
        if found != 0 or nvml.nvmlDeviceGetMaxClockInfo(handle, NVML_CLOCK_MEM, ctypes.byref(clock)) != 0:
            return None
        if nvml.nvmlDeviceGetMemoryBusWidth(handle, ctypes.byref(width)) != 0:
            return None
    finally:
        nvml.nvmlShutdown()
    if not clock.value or not width.value:
        return None
    return dram_bandwidth(clock.value, width.value)


def device_bandwidth(device_index: int) -> float | None:
    """Peak DRAM bytes per second of visible GPU `device_index` (CUDA's numbering), or None."""
    from builder.verify.environment import visible_gpu_ids

    ids = visible_gpu_ids()
    return peak_dram_bandwidth(ids[device_index]) if 0 <= device_index < len(ids) else None


def floor_bytes(manifest: dict[str, Any]) -> int | None:
    """Bytes every correct kernel must move: its outputs, and each input, parameter or buffer the reference's output
    responded to (None when the manifest gives no output sizes)."""
    outputs = manifest.get("output_bytes")
    if not isinstance(outputs, list) or not outputs:
        return None
    total = sum(int(n) for n in outputs)
    sizes = manifest.get("target_bytes") or []
    for entry in manifest.get("responsive_targets") or []:
        index = int(entry[0])
        if 0 <= index < len(sizes):
            total += int(sizes[index])
    return total


def floor_ms(manifest: dict[str, Any], bandwidth: float | None) -> float | None:
    """The least time the device needs to move `floor_bytes` at `bandwidth` bytes per second, in ms."""
    moved = floor_bytes(manifest)
    if not moved or not bandwidth or bandwidth <= 0:
        return None
    return moved / bandwidth * 1e3


def record_floor(manifest: dict[str, Any], backend: str, device_index: int) -> float | None:
    """floor_ms of a record: CUDA only (a CPU's caches and a shared host's memory traffic make no bound worth
    stating)."""
    if backend != "cuda":
        return None
    return floor_ms(manifest, device_bandwidth(device_index))


def judge_runtime(runtime_ms: float | None, floor: float | None) -> tuple[float | None, str | None]:
    """(speed_of_light, why the runtime is implausible or None) of a measured runtime against its floor."""
    if runtime_ms is None or floor is None or runtime_ms <= 0 or floor <= 0:
        return None, None
    speed = floor / runtime_ms
    if runtime_ms < config.IMPLAUSIBLE_RUNTIME_FRACTION * floor:
        why = (f"runtime {runtime_ms:.4g} ms is {speed:.3g}x faster than the device's DRAM can move the outputs and "
               f"the inputs they depend on ({floor:.4g} ms at peak bandwidth)")  # fmt: skip
        return speed, why
    return speed, None
