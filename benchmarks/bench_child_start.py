"""What a pre-started evaluation child costs to start: forked from a zygote into a sandbox of its own, or exec'd.

Starts `--children` pre-started children of the real child module (`builder.verify.child.main`: torch, the checks'
imports, the CUDA context where a GPU is visible) each way, through the pool the builder uses, waits until every
one sits idle on its job pipe, and counts the CPU seconds of everything each start took: the exec'd child and its
bwrap processes, or the forked child, its supervisor and its sandbox's bwrap processes. The zygote's own imports
are counted once, beside. Prints core-seconds and wall seconds per child, and the ratio.

    python benchmarks/bench_child_start.py [--children 8] [--backend cpu|cuda]

Needs bubblewrap (without it, children are exec'd either way).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from builder.verify.sandbox import bytecode_cache  # noqa: E402
from builder.verify.sandbox.bubblewrap import bwrap_usable  # noqa: E402
from builder.verify.sandbox.forked import ForkedProcess  # noqa: E402
from builder.verify.sandbox.pool import EvalPool  # noqa: E402

IDLE_FOR_S = 1.0  # a child whose CPU has not moved for this long is waiting for its job
START_LIMIT_S = 600.0


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _processes(process) -> list[psutil.Process]:
    """Every process one pre-started child's start took (its sandbox's bwrap processes included)."""
    found = _tree(process.proc.pid)
    if isinstance(process, ForkedProcess) and process.child_pid is not None:
        try:
            child = psutil.Process(process.child_pid)
            found += [child, child.parent()]  # the child and its supervisor, outside the holder's tree
        except psutil.Error:
            pass
    return found


def _cpu_s(processes: list[psutil.Process]) -> float:
    """CPU seconds of these processes, all threads, in nanoseconds' resolution where the kernel keeps schedstat
    (a fork's start takes milliseconds: the clock ticks of cpu_times would read most of them as 0)."""
    total = 0.0
    for proc in processes:
        try:
            tasks = Path(f"/proc/{proc.pid}/task")
            total += sum(int((task / "schedstat").read_text().split()[0]) for task in tasks.iterdir()) / 1e9
        except (OSError, ValueError, IndexError):
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.Error:
                continue
    return total


def _wait_idle(pool: EvalPool) -> None:
    """Until the CPU of every ready child has stood still for IDLE_FOR_S."""
    deadline, last, still_since = time.monotonic() + START_LIMIT_S, None, time.monotonic()
    while time.monotonic() < deadline:
        now = [round(_cpu_s(_processes(child.process)), 2) for child in pool._ready]
        if now != last:
            last, still_since = now, time.monotonic()
        elif time.monotonic() - still_since >= IDLE_FOR_S:
            return
        time.sleep(0.2)
    raise SystemExit("children did not settle within the limit")


def measure(fork: bool, children: int, gpu: bool) -> dict:
    started = time.perf_counter()
    env = {"CUDA_VISIBLE_DEVICES": "0" if gpu else ""}
    with EvalPool(children, gpu=gpu, env_extra=env, fork=fork) as pool:
        _wait_idle(pool)
        wall = time.perf_counter() - started - IDLE_FOR_S
        per_child = [_cpu_s(_processes(child.process)) for child in pool._ready]
        kinds = {type(child.process).__name__ for child in pool._ready}
        zygote_cpu = _cpu_s([psutil.Process(pool._zygote.process.pid)]) if pool._zygote else 0.0  # imports, forks
    return {"kinds": sorted(kinds), "per_child_cpu_s": per_child, "zygote_cpu_s": zygote_cpu, "wall_s": wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=8)
    parser.add_argument("--backend", choices=("cpu", "cuda"), default=None)
    args = parser.parse_args()
    gpu = (args.backend or ("cuda" if _has_gpu() else "cpu")) == "cuda"
    print(f"machine: {platform.node()} cpus={os.cpu_count()} python={platform.python_version()} "
          f"backend={'cuda' if gpu else 'cpu'} bwrap={bwrap_usable()}")  # fmt: skip
    if not bwrap_usable():
        print("bubblewrap is not usable here: children are exec'd either way; nothing to compare")
        return 0
    bytecode_cache.warm()  # both ways read the same compiled byte code; its one-time compile is not a start's
    results = {}
    for fork in (False, True):
        results[fork] = measure(fork, args.children, gpu)
        result = results[fork]
        print(f"{'forked' if fork else 'exec-d'} ({', '.join(result['kinds'])}): {args.children} children, "
              f"CPU per child median {statistics.median(result['per_child_cpu_s']):.3f} s "
              f"(min {min(result['per_child_cpu_s']):.3f}, max {max(result['per_child_cpu_s']):.3f}); "
              f"all ready in {result['wall_s']:.1f} s wall"
              + (f"; the zygote {result['zygote_cpu_s']:.2f} core-s (its imports once, and these forks)"
                 if fork else ""))  # fmt: skip
    exec_cpu = statistics.median(results[False]["per_child_cpu_s"])
    fork_cpu = statistics.median(results[True]["per_child_cpu_s"])
    print(
        f"start-up CPU per child, exec'd / forked: {exec_cpu:.3f} / {fork_cpu:.3f} s = {exec_cpu / fork_cpu:.0f}x "
        f"(the zygote's once per stream and GPU: {results[True]['zygote_cpu_s']:.2f} s)"
    )
    return 0


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


if __name__ == "__main__":
    sys.exit(main())
