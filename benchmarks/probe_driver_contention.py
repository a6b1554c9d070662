"""Do the driver's calls slow down when two GPUs are busy at once, rather than one?

With two engine processes (one per GPU) the checks' steps that allocate on the device or start the profiler took
1.4-1.8x their one-GPU wall on the same CPU seconds (docs/gpu-runs.md, 2026-11-26): a wait off the CPU, outside
the run queue. This probe runs the same workers per GPU on one GPU, then on two at once, each worker in a process
of its own (CUDA_VISIBLE_DEVICES: one GPU), timing three kinds of step in rounds, wall and CPU seconds:

- `alloc`: a fresh 256 MiB block from the driver and back (`torch.cuda.empty_cache`), as a child's first trial does;
- `profiler`: a torch.profiler (CUPTI) session around one small matmul, as the op census does;
- `compute`: ten 2048² matmuls and a synchronisation, the GPU's own work (the control);
- `copies`: 64 MiB from pageable host memory to the device and back, as a child's inputs and outputs go;
- `fresh_context`: a fresh process makes a CUDA context, allocates 256 MiB and exits, as every evaluation child
  does (wall and CPU of the process, from its parent worker).

A step whose wall grows with the second GPU while its CPU seconds stay put waits on something both GPUs share.

    python benchmarks/probe_driver_contention.py [--workers 8] [--rounds 20] [--gpus 1,2] [--out F.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

STEPS = ("alloc", "profiler", "compute", "copies", "fresh_context")
# The driver API alone, through ctypes: a context and a block, the process's exit tears both down.
FRESH_CONTEXT = """
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
device, context, block = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
for name, call in (("cuInit", lambda: cuda.cuInit(0)),
                   ("cuDeviceGet", lambda: cuda.cuDeviceGet(ctypes.byref(device), 0)),
                   ("cuDevicePrimaryCtxRetain", lambda: cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)),
                   ("cuCtxSetCurrent", lambda: cuda.cuCtxSetCurrent(context)),
                   ("cuMemAlloc", lambda: cuda.cuMemAlloc_v2(ctypes.byref(block), ctypes.c_size_t(256 << 20)))):
    if call() != 0:
        sys.exit(f"{name} failed")
"""


def worker(rounds: int, start_at: float) -> int:
    """One worker's rounds, one JSON line per step on stdout (runs in its own process, on its one visible GPU)."""
    import warnings

    import torch

    warnings.filterwarnings("ignore", category=UserWarning)  # the profiler's per-session notice, once a worker
    if not torch.cuda.is_available():
        print("error: this worker sees no GPU", file=sys.stderr)
        return 1
    device = torch.device("cuda")
    a = torch.randn(2048, 2048, device=device)
    host, on_device = torch.ones(16 << 20), torch.ones(16 << 20, device=device)  # 64 MiB each
    torch.cuda.synchronize()
    time.sleep(max(0.0, start_at - time.time()))  # every worker of a configuration starts its rounds together
    for _ in range(rounds):
        for step in STEPS:
            wall, cpu = time.perf_counter(), time.process_time()
            if step == "fresh_context":
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                subprocess.run([sys.executable, "-c", FRESH_CONTEXT], check=True)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                child_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
                print(json.dumps({"step": step, "wall_s": time.perf_counter() - wall, "cpu_s": child_cpu}))
                continue
            if step == "alloc":
                block = torch.empty(256 << 20, dtype=torch.uint8, device=device)
                del block
                torch.cuda.empty_cache()
            elif step == "profiler":
                activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
                with torch.profiler.profile(activities=activities):
                    torch.mm(a, a)
                    torch.cuda.synchronize()
            elif step == "copies":
                host.to(device)
                on_device.cpu()
            else:
                for _ in range(10):
                    torch.mm(a, a)
            torch.cuda.synchronize()
            print(json.dumps({"step": step, "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}))
    return 0


def run_configuration(gpus: int, workers: int, rounds: int) -> list[dict]:
    """`workers` processes on each of the first `gpus` GPUs, started together; their steps' timings."""
    start_at = time.time() + 15.0  # time for every worker to import torch and make its context
    processes = []
    for index in range(gpus * workers):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(index % gpus))
        argv = [sys.executable, __file__, "--worker", "--rounds", str(rounds), "--start-at", str(start_at)]
        processes.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True))
    rows = []
    for process in processes:
        out, _ = process.communicate()
        rows += [{**json.loads(line), "gpus": gpus} for line in out.splitlines() if line.startswith("{")]
    return rows


def summary(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Median wall and CPU seconds of each step, and its wall's 90th percentile (a lock held now and then shows
    there first), per GPU count: {"1 GPU alloc": {"wall_s": .., "cpu_s": .., "wall_p90_s": ..}}."""
    out = {}
    for gpus in sorted({row["gpus"] for row in rows}):
        for step in STEPS:
            mine = [row for row in rows if row["gpus"] == gpus and row["step"] == step]
            if mine:
                out[f"{gpus} GPU{'s' if gpus > 1 else ''} {step}"] = {
                    "wall_s": statistics.median(r["wall_s"] for r in mine),
                    "cpu_s": statistics.median(r["cpu_s"] for r in mine),
                    "wall_p90_s": statistics.quantiles([r["wall_s"] for r in mine], n=10, method="inclusive")[-1] if len(mine) > 1
                    else mine[0]["wall_s"], "n": len(mine)}  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8, help="worker processes per GPU (default 8, as the engine)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--gpus", default="1,2", help="GPU counts to run, one configuration each (default 1,2)")
    parser.add_argument("--out", type=Path, default=None, help="write every step's timing here, JSON")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.rounds, args.start_at)
    try:
        counts = [int(n) for n in args.gpus.split(",")]
    except ValueError:
        parser.error(f"--gpus: a comma-separated list of integers, not {args.gpus!r}")
    if min(counts) < 1 or args.workers < 1 or args.rounds < 1:
        parser.error("--gpus, --workers and --rounds must be 1 or more")
    rows = []
    for gpus in counts:
        rows += run_configuration(gpus, args.workers, args.rounds)
    if not rows:
        print("error: no timings: every worker failed (are the GPUs visible?)", file=sys.stderr)
        return 1
    for name, figures in summary(rows).items():
        print(f"{name:<26} wall {figures['wall_s'] * 1000:8.2f} ms (p90 {figures['wall_p90_s'] * 1000:8.2f})  "
              f"cpu {figures['cpu_s'] * 1000:8.2f} ms  ({figures['n']} steps)")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
