"""Where an evaluation child's time goes (untrusted child side): its phases, for the bench's log alone.

The figures are the candidate's process's own claims: `phase_s` in the result, which the parent logs beside its own
watcher's phases and never puts in a record.
"""

from __future__ import annotations

import gc
import sys
import time
from typing import Any


class EvaluationPhases:
    """Wall seconds per phase of an evaluation (`phase_s` in the result), under "cpu." names this process's CPU
    seconds (all threads), under "rq." names the main thread's wait for a core (`checks.run_queue_s`);
    "cpu.start_up" and "rq.start_up" are what it used and waited before its job (a pre-started child pays them
    ahead). "wait_for_start_up" is how long the job waited for this process to read it (a pre-started child still
    making its context, an exec'd one importing). On CUDA, "device_allocs." names count the blocks the caching
    allocator asked the driver for. "gc" is the wall time the cyclic garbage collector took over the job, and
    "gc_full_collections" how often it walked every generation."""

    def __init__(self, handed_over_at: float | None = None) -> None:
        from builder.verify.child.checks import run_queue_s

        self._gc_s, self._gc_full, self._gc_started = 0.0, 0, 0.0
        gc.callbacks.append(self._on_collection)
        self._run_queue_s = run_queue_s
        self._last, self._last_cpu, self._last_rq = time.perf_counter(), time.process_time(), run_queue_s()
        self._last_allocs = _device_allocs()
        self.seconds: dict[str, float] = {
            "cpu.start_up": round(self._last_cpu, 4),
            "rq.start_up": round(self._last_rq, 4),
        }
        if isinstance(handed_over_at, (int, float)):  # the parent's clock: the same host's
            self.seconds["wait_for_start_up"] = round(max(0.0, time.time() - handed_over_at), 4)
        if self._last_allocs is not None:
            self.seconds["device_allocs.start_up"] = self._last_allocs

    def done(self, name: str) -> None:
        now, cpu, rq, allocs = time.perf_counter(), time.process_time(), self._run_queue_s(), _device_allocs()
        self.seconds[name] = round(now - self._last, 4)
        self.seconds[f"cpu.{name}"] = round(cpu - self._last_cpu, 4)
        self.seconds[f"rq.{name}"] = round(rq - self._last_rq, 4)
        if allocs is not None and self._last_allocs is not None:
            self.seconds[f"device_allocs.{name}"] = allocs - self._last_allocs
        self._last, self._last_cpu, self._last_rq, self._last_allocs = now, cpu, rq, allocs

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        self._gc_s += time.perf_counter() - self._gc_started
        self._gc_full += info.get("generation") == 2

    def finish(self) -> dict[str, float]:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)
        self.seconds["gc"] = round(self._gc_s, 4)
        self.seconds["gc_full_collections"] = self._gc_full
        return self.seconds


def _device_allocs() -> int | None:
    """Blocks this process's caching allocator has asked the driver for (cudaMalloc), or None without CUDA."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    stats = torch.cuda.memory_stats()
    return int(stats.get("num_device_alloc", stats.get("segment.all.allocated", 0)))
