"""Which cores a process and its sandboxed children run on (trusted parent side): on CUDA builds a few cores per GPU
are kept for its timing windows, and children start on the others (`engine/device_gate.py` says why)."""

from __future__ import annotations

import os
import threading

_lock = threading.Lock()
_timing_cores: dict[int, set[int]] = {}  # device index -> cores kept for its timing windows
_work_cores: set[int] | None = None  # every other core: where sandboxed children start
_own_cores: set[int] | None = None  # this process's cores before any were kept


def keep_timing_cores(devices: int, per_device: int, available: set[int] | None = None) -> dict[int, set[int]]:
    """Keep `per_device` cores per GPU for its timing windows: sandboxed children start on the other cores, and a
    process that owns a GPU moves onto that GPU's cores. Host-side launch overhead is part of what a window
    measures (most of it for sub-millisecond eager baselines), so compiles and other children's start-up must
    not share its cores. Nothing is kept when too few cores would be left for the rest (half of them), or when
    `devices` or `per_device` is 0: the process's threads go back to the cores they had, and a later keep reads
    the process's cores afresh (a caller may have given it others meanwhile)."""
    global _work_cores, _own_cores
    with _lock:
        if _own_cores is None:
            _own_cores = set(os.sched_getaffinity(0))
        cores = sorted(available if available is not None else _own_cores)
        _timing_cores.clear()
        _work_cores = None
        if per_device <= 0 or devices <= 0 or devices * per_device > len(cores) // 2:
            move_this_process(_own_cores)
            _own_cores = None
            return {}
        for device in range(devices):
            _timing_cores[device] = set(cores[len(cores) - (device + 1) * per_device :][:per_device])
        kept = set().union(*_timing_cores.values())
        _work_cores = {core for core in cores if core not in kept}
        move_this_process(_work_cores)  # the parent's own judging and polling stay off the kept cores too
        return {device: set(cores) for device, cores in _timing_cores.items()}


def move_this_process(cores: set[int]) -> None:
    """Every thread of this process onto `cores` (threads started later inherit their creator's mask)."""
    for task in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(task), cores)
        except OSError:
            continue


def work_cores() -> set[int] | None:
    """Where a sandboxed child starts (None: anywhere)."""
    return _work_cores


def timing_cores(device_index: int) -> set[int] | None:
    """The cores kept for one GPU's timing windows (None: none kept)."""
    with _lock:
        return _timing_cores.get(device_index)
