"""Where does an evaluation child's start-up CPU go (throughput)?

Runs fresh processes that do what `builder.verify.child.main` does before its job (import torch, the CPU allocator's
set-up, the fingerprints' imports, the CUDA context), timing each stage's CPU (all threads) and wall, and counts
how many of the Python modules they imported came from a cached `.pyc` that was already on disk: a child in the
read-only sandbox cannot write one, so a module without it is compiled again in every child.

    python benchmarks/probe_child_start_up.py [--processes 3] [--pycache-prefix DIR] [--out F.json]

With --pycache-prefix the processes read (and the first writes) byte code under DIR (PYTHONPYCACHEPREFIX).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
PROCESS_STARTED_EPOCH = time.time()  # byte code written after this was compiled by this process


def _stage(timings: list, name: str, started: list) -> None:
    cpu, wall = time.process_time(), time.perf_counter()
    timings.append({"stage": name, "cpu_s": round(cpu - started[0], 4), "wall_s": round(wall - started[1], 4)})
    started[:] = [cpu, wall]


def _cached_modules() -> dict[str, int]:
    """Imported source modules by whether their byte code was on disk before this process started."""
    counts = {"with_pyc": 0, "without_pyc": 0}
    for module in list(sys.modules.values()):
        source, cached = getattr(module, "__file__", None), getattr(module, "__cached__", None)
        if not isinstance(source, str) or not source.endswith(".py") or not isinstance(cached, str):
            continue
        try:
            fresh = os.path.getmtime(cached) < PROCESS_STARTED_EPOCH
        except OSError:
            fresh = False
        counts["with_pyc" if fresh else "without_pyc"] += 1
    return counts


def child() -> None:
    sys.path.insert(0, str(REPOSITORY))
    timings: list = [{"stage": "interpreter", "cpu_s": round(time.process_time(), 4), "wall_s": None}]
    started = [time.process_time(), time.perf_counter()]
    import torch

    _stage(timings, "import torch", started)
    from builder.verify.child.poison import configure_cpu_allocator

    configure_cpu_allocator()
    _stage(timings, "builder modules, CPU allocator", started)
    import torch._dynamo  # noqa: F401

    _stage(timings, "import torch._dynamo", started)
    import torch.profiler  # noqa: F401

    _stage(timings, "import torch.profiler", started)
    if torch.cuda.is_available():
        torch.cuda.init()
        _stage(timings, "torch.cuda.init", started)
        torch.empty(1, device="cuda")
        torch.cuda.synchronize()
        _stage(timings, "CUDA context", started)
    print(json.dumps({"stages": timings, "modules": _cached_modules(), "total_cpu_s": round(time.process_time(), 3)}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--pycache-prefix", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child()
        return 0
    environment = dict(os.environ)
    if args.pycache_prefix:
        environment["PYTHONPYCACHEPREFIX"] = str(args.pycache_prefix)
        environment.pop("PYTHONDONTWRITEBYTECODE", None)  # the first process writes what the later ones read
    runs = []
    for _ in range(args.processes):
        done = subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True, timeout=300,
                              env=environment)  # fmt: skip
        if done.returncode != 0:
            print(f"a process failed: {done.stderr.strip()[-500:]}", file=sys.stderr)
            return 1
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    stages = [stage["stage"] for stage in runs[-1]["stages"]]
    summary = {
        "pycache_prefix": str(args.pycache_prefix) if args.pycache_prefix else None,
        "cpu_s_median": {
            name: statistics.median(next(s["cpu_s"] for s in run["stages"] if s["stage"] == name) for run in runs)
            for name in stages
        },  # fmt: skip
        "total_cpu_s": [run["total_cpu_s"] for run in runs],
        "modules": [run["modules"] for run in runs],
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
