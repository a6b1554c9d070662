"""What the throughput bench watches while a stream runs, without hooks in the engine: the compile stage's builds
(`CountingVerifier`), the engine's DEBUG log (`PhaseLog`), the GPU's utilisation (`GpuSampler`), and a record's
Nsight Compute profile (`profile_note`)."""

from __future__ import annotations

import json
import logging
import shutil
import statistics
import subprocess
import threading
import time

from builder.verify.compile import shared_source
from builder.verify.engine import stages
from builder.verify.engine.verifier import Verifier
from builder.verify.options import VerifyOptions

_ENGINE_BUILD = stages.CompileStage._build  # the engine's own, wrapped afresh for each verifier


class CountingVerifier(Verifier):
    """The engine as it is, counting the compile CPU time its builds report (in this process: with engine processes
    the builds are theirs). The bench wraps the compile stage's build, as a profiler would; the engine has no hook."""

    def __init__(self, options: VerifyOptions) -> None:
        super().__init__(options)
        self.builds: dict[str, float] = {}
        self.members: dict[str, int] = {}  # kernels in each build
        self.timeline: list[tuple[float, float, int, bool, float]] = []  # start, end, kernels, ok, core-s
        self._count_builds()

    def _count_builds(self) -> None:
        real_build, counter = _ENGINE_BUILD, self

        def counted(stage, source, language, *how, **how_named):
            began = time.monotonic()
            result = real_build(stage, source, language, *how, **how_named)
            kernels = max(1, source.count(f"{shared_source.SHARED_MODULE_VAR}.def_submodule("))
            if result is not None and result.cache_key:
                counter.builds[result.cache_key] = result.cpu_s or 0.0
                counter.members[result.cache_key] = kernels
            if result is not None:
                counter.timeline.append((began, time.monotonic(), kernels, result.ok, result.cpu_s or 0.0))
            return result

        stages.CompileStage._build = counted  # this bench process's streams, one verifier at a time

    def start_lines(self, started: float, until: float | None) -> list[str]:
        """Each build that began before `until` (the first evaluated record), from the run's start: the start's
        critical path is among them."""
        return [f"build of {kernels:2d} {'ok' if ok else 'failed':6s} {began - started:6.1f}-{ended - started:6.1f} s,"
                f" {cpu_s:5.1f} core-s" for began, ended, kernels, ok, cpu_s in sorted(self.timeline)
                if until is None or began - started < until]  # fmt: skip

    def compile_by_size(self) -> dict[str, float]:
        """Core-seconds per build by its kernel count, and a fit core-s = header + per-kernel x kernels: the
        cost paid once per build against the cost of each kernel (what a batch size trades)."""
        sizes: dict[int, list[float]] = {}
        for key, cpu_s in self.builds.items():
            if cpu_s > 0:
                sizes.setdefault(self.members[key], []).append(cpu_s)
        figures = {f"compile core-s per build of {size} (mean of {len(v)})": statistics.mean(v)
                   for size, v in sorted(sizes.items())}  # fmt: skip
        points = [(size, cpu_s) for size, values in sizes.items() for cpu_s in values]
        if len({size for size, _ in points}) >= 2:
            per_kernel, header = statistics.linear_regression([p[0] for p in points], [p[1] for p in points])
            figures["compile fit: core-s per build (header)"] = header
            figures["compile fit: core-s per kernel"] = per_kernel
        return figures


class PhaseLog(logging.Handler):
    """Collects the evaluation children's `phase_s` (the engine logs them at DEBUG)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.by_kernel: dict[str, dict[str, float]] = {}
        self.engines: dict[str, dict] = {}  # engine process name -> its totals (`engine_process.engine_totals`)
        self.handed_back: list[int] = []  # pairs each hand-back at a stream's end moved (`hand_back.py`)

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("engine totals: "):
            try:
                self.engines[record.processName] = json.loads(message.removeprefix("engine totals: "))
            except ValueError:
                pass
        elif record.name == "builder.verify.engine.device_engines" and " handed back " in message:
            self.handed_back.append(int(message.split(" handed back ")[1].split()[0]))
        elif message.startswith("evaluation phases of "):
            name, _, phases = message.removeprefix("evaluation phases of ").partition(": ")
            try:
                self.by_kernel[name] = json.loads(phases) or {}
            except ValueError:
                pass

    @property
    def phases(self) -> list[dict[str, float]]:
        return list(self.by_kernel.values())

    def means(self) -> dict[str, float]:
        names = dict.fromkeys(name for phases in self.phases for name in phases)
        return {name: statistics.mean(p.get(name, 0.0) for p in self.phases) for name in names}


class GpuSampler(threading.Thread):
    """nvidia-smi's utilisation every 200 ms: busy seconds = sum(utilisation x interval)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.busy_s = 0.0
        self.process = None

    def run(self) -> None:
        if shutil.which("nvidia-smi") is None:
            return
        command = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "200"]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        for line in self.process.stdout:
            values = [float(v) for v in line.split(",") if v.strip().replace(".", "").isdigit()]
            self.busy_s += (values[0] if values else 0.0) / 100 * 0.2

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()


def profile_note(record) -> str:
    """What Nsight Compute made of a record: how many kernels it profiled, or why it has no profile."""
    try:
        profile = json.loads(record.ncu_profile) if record.ncu_profile else None
    except ValueError:
        profile = None
    if not isinstance(profile, dict):
        return "  ncu=none"
    if "error" in profile:
        return f"  ncu error: {str(profile['error'])[:120]}"
    return f"  ncu={len(profile.get('kernels') or [])} kernels"
