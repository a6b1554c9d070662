"""Do the driver's calls slow down when two GPUs are busy at once, rather than one?

With two engine processes (one per GPU) the checks' steps that allocate on the device or start the profiler took
1.4-1.8x their one-GPU wall on the same CPU seconds (two-GPU runs of bench_verify_throughput.py, 2026-11-26): a
wait off the CPU, outside the run queue. This probe runs the same workers per GPU on one GPU, then on two at once,
each worker in a process of its own (CUDA_VISIBLE_DEVICES: one GPU), timing these steps in rounds, wall and CPU
seconds:

- `alloc`: a fresh 256 MiB block from the driver and back (`torch.cuda.empty_cache`), as a child's first trial does;
- `profiler`: a torch.profiler (CUPTI) session around one small matmul, as the op census does;
- `compute`: ten 2048² matmuls and a synchronisation, the GPU's own work (the control);
- `copies`: 64 MiB from pageable host memory to the device and back, as a child's inputs and outputs go;
- `mem_get_info`: the device's free memory, asked of the driver (what the poison may take);
- `events`: two timing events made, recorded around nothing and read, as each timed call makes them;
- `poison`: the checks' NaN poison before a call (`builder.verify.child.poison.poison_cuda`, a 16 MiB output);
- `fresh_context`: a fresh process makes a CUDA context, allocates 256 MiB and exits, as every evaluation child
  does (wall and CPU of the process, from its parent worker), and the parts of its wall: `.start` (the
  interpreter, and torch's import with `--fresh-kind torch`), `.init` (the context), with torch
  `.dynamo_import` (torch._dynamo, which a profiler run imports and a pre-started child imports before its job),
  `.alloc` (the block; with torch also a matmul, which starts cuBLAS), with torch `.first_ops` (the first use of
  the ops a trial's set-up and checks start with: each loads its kernels), `.ops_again` (the same ops on other
  sizes), `.profiler` (a CUDA profiler run around a matmul, as the op census's: CUPTI's set-up in a process's
  first) and `.profiler_again` (a second), and `.exit` (its last mark to its end: the teardown). With
  `--fresh-env KA_PROBE_PRIME_PROFILER=1` it first profiles nothing right after its context
  (`.empty_profiler`), as a pre-started child could before its job, and fails if that run did device work.

A step whose wall grows with the second GPU while its CPU seconds stay put waits on something both GPUs share.
`--fresh-env NAME=VALUE` sets a variable in the fresh processes only, to see what a driver setting saves (with
`CUDA_DEVICE_MAX_CONNECTIONS=1` each context gets one hardware work queue instead of the driver's eight).

    python benchmarks/probe_driver_contention.py [--workers 8] [--rounds 20] [--gpus 1,2] [--steps alloc,...]
        [--fresh-kind driver|torch] [--fresh-env NAME=VALUE ...] [--out F.json]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the `poison` step runs the checks' own poison

STEPS = ("alloc", "profiler", "compute", "copies", "mem_get_info", "events", "poison", "fresh_context")
# Each fresh process prints its marks (wall-clock seconds) as one JSON line, in order: "started", then one
# "PART_done" a part; its exit tears the context down.
FRESH_DRIVER = """
import time
marks = {"started": time.time()}
import ctypes, json, sys
cuda = ctypes.CDLL("libcuda.so.1")
device, context, block = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
for name, call in (("cuInit", lambda: cuda.cuInit(0)),
                   ("cuDeviceGet", lambda: cuda.cuDeviceGet(ctypes.byref(device), 0)),
                   ("cuDevicePrimaryCtxRetain", lambda: cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)),
                   ("cuCtxSetCurrent", lambda: cuda.cuCtxSetCurrent(context))):
    if call() != 0:
        sys.exit(f"{name} failed")
marks["init_done"] = time.time()
if cuda.cuMemAlloc_v2(ctypes.byref(block), ctypes.c_size_t(256 << 20)) != 0:
    sys.exit("cuMemAlloc failed")
marks["alloc_done"] = time.time()
print(json.dumps(marks), flush=True)
"""
FRESH_TORCH = """
import time
marks = {}
import json, os, sys, torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

marks["started"] = time.time()
torch.cuda.init()
torch.empty(1, device="cuda")
torch.cuda.synchronize()
marks["init_done"] = time.time()
import torch._dynamo  # noqa: F401  (a profiler run imports it: seconds a pre-started child pays before its job)

marks["dynamo_import_done"] = time.time()
ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
if os.environ.get("KA_PROBE_PRIME_PROFILER") == "1":  # as a pre-started child could, before its job
    with profile(activities=ACTIVITIES) as empty:
        pass
    if any(event.device_type == DeviceType.CUDA for event in empty.events()):
        sys.exit("the empty profiler run did device work")
    marks["empty_profiler_done"] = time.time()
a = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
b = torch.ones(1024, 1024, device="cuda")
(b @ b).sum().item()
marks["alloc_done"] = time.time()


def ops(n):
    torch.manual_seed(n)
    x = torch.randn(n, device="cuda")
    y = torch.empty(n, device="cuda").uniform_(-1, 1)
    z = torch.rand(n, device="cuda").normal_()
    w = (x * y + z).clone().abs().max()
    (torch.zeros(n, device="cuda") == torch.full((n,), 1.0, device="cuda")).any().item()
    return w.cpu()


ops(1 << 20)
torch.cuda.synchronize()
marks["first_ops_done"] = time.time()
ops(3 << 20)
torch.cuda.synchronize()
marks["ops_again_done"] = time.time()
for part in ("profiler", "profiler_again"):  # the op census's profiler run, then the same once more
    with profile(activities=ACTIVITIES) as census:
        (b @ b).sum()
        torch.cuda.synchronize()
    list(census.events())
    marks[f"{part}_done"] = time.time()
print(json.dumps(marks), flush=True)
os._exit(0)  # as an evaluation child ends: no interpreter teardown
"""
FRESH_SOURCES = {"driver": FRESH_DRIVER, "torch": FRESH_TORCH}


def fresh_context_rows(kind: str, env: dict[str, str]) -> list[dict]:
    """One fresh process's whole wall and CPU, and its parts (no CPU seconds of their own): "start" up to its
    first mark, one a "PART_done" mark, "exit" from its last mark."""
    before, spawned = resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
    done = subprocess.run([sys.executable, "-c", FRESH_SOURCES[kind]], env=env, check=True, capture_output=True,
                          text=True)  # fmt: skip
    ended, after = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    marks = json.loads(done.stdout.strip().splitlines()[-1])
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    rows = [{"step": "fresh_context", "wall_s": ended - spawned, "cpu_s": cpu}]
    parts = ["start"] + [name.removesuffix("_done") for name in list(marks)[1:]] + ["exit"]
    bounds = [spawned, *marks.values(), ended]
    for part, start, end in zip(parts, bounds[:-1], bounds[1:], strict=True):
        rows.append({"step": f"fresh_context.{part}", "wall_s": end - start, "cpu_s": None})
    return rows


def worker(rounds: int, start_at: float, steps: list[str], fresh_kind: str, fresh_env: dict[str, str]) -> int:
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
    env = {**os.environ, **fresh_env}
    torch.cuda.synchronize()
    time.sleep(max(0.0, start_at - time.time()))  # every worker of a configuration starts its rounds together
    for _ in range(rounds):
        for step in steps:
            if step == "fresh_context":
                for row in fresh_context_rows(fresh_kind, env):
                    print(json.dumps(row))
                continue
            wall, cpu = time.perf_counter(), time.process_time()
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
            elif step == "mem_get_info":
                torch.cuda.mem_get_info()
            elif step == "events":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                end.record()
                end.synchronize()
                start.elapsed_time(end)
            elif step == "poison":
                from builder.verify.child.poison import poison_cuda

                poison_cuda([16 << 20])
            else:
                for _ in range(10):
                    torch.mm(a, a)
            torch.cuda.synchronize()
            print(json.dumps({"step": step, "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}))
    return 0


def run_configuration(gpus: int, workers: int, worker_args: list[str]) -> list[dict]:
    """`workers` processes on each of the first `gpus` GPUs, started together; their steps' timings."""
    start_at = time.time() + 15.0  # time for every worker to import torch and make its context
    processes = []
    for index in range(gpus * workers):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(index % gpus))
        argv = [sys.executable, __file__, "--worker", "--start-at", str(start_at), *worker_args]
        processes.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True))
    rows = []
    for process in processes:
        out, _ = process.communicate()
        rows += [{**json.loads(line), "gpus": gpus} for line in out.splitlines() if line.startswith("{")]
    return rows


def summary(rows: list[dict]) -> dict[str, dict[str, float | None]]:
    """Median wall and CPU seconds of each step (CPU None for a fresh process's parts), and its wall's 90th
    percentile (a lock held now and then shows there first), per GPU count:
    {"1 GPU alloc": {"wall_s": .., "cpu_s": .., "wall_p90_s": .., "n": ..}}, steps in their first row's order."""
    out: dict[str, dict[str, float | None]] = {}
    steps = list(dict.fromkeys(row["step"] for row in rows))
    for gpus in sorted({row["gpus"] for row in rows}):
        for step in steps:
            walls = [row["wall_s"] for row in rows if row["gpus"] == gpus and row["step"] == step]
            cpus = [row["cpu_s"] for row in rows if row["gpus"] == gpus and row["step"] == step
                    and row["cpu_s"] is not None]  # fmt: skip
            if walls:
                out[f"{gpus} GPU{'s' if gpus > 1 else ''} {step}"] = {
                    "wall_s": statistics.median(walls),
                    "cpu_s": statistics.median(cpus) if cpus else None,
                    "wall_p90_s": statistics.quantiles(walls, n=10, method="inclusive")[-1] if len(walls) > 1
                    else walls[0], "n": len(walls)}  # fmt: skip
    return out


def _milliseconds(seconds: float | None) -> str:
    return "       -" if seconds is None else f"{seconds * 1000:8.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8, help="worker processes per GPU (default 8, as the engine)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--gpus", default="1,2", help="GPU counts to run, one configuration each (default 1,2)")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"steps of each round (default {','.join(STEPS)})")
    parser.add_argument("--fresh-kind", choices=sorted(FRESH_SOURCES), default="driver",
                        help="a fresh process through the driver API alone (default) or through torch")  # fmt: skip
    parser.add_argument("--fresh-env", action="append", default=[], metavar="NAME=VALUE",
                        help="set in the fresh processes only (repeatable)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="write every step's timing here, JSON")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    steps = [s for s in args.steps.split(",") if s]
    if not steps or set(steps) - set(STEPS):
        parser.error(f"--steps: some of {','.join(STEPS)}, not {args.steps!r}")
    if any("=" not in item or item.startswith("=") for item in args.fresh_env):
        parser.error("--fresh-env: NAME=VALUE")
    fresh_env = dict(item.split("=", 1) for item in args.fresh_env)
    if args.worker:
        return worker(args.rounds, args.start_at, steps, args.fresh_kind, fresh_env)
    try:
        counts = [int(n) for n in args.gpus.split(",")]
    except ValueError:
        parser.error(f"--gpus: a comma-separated list of integers, not {args.gpus!r}")
    if min(counts) < 1 or args.workers < 1 or args.rounds < 1:
        parser.error("--gpus, --workers and --rounds must be 1 or more")
    worker_args = ["--rounds", str(args.rounds), "--steps", ",".join(steps), "--fresh-kind", args.fresh_kind]
    worker_args += [f"--fresh-env={item}" for item in args.fresh_env]
    rows = []
    for gpus in counts:
        rows += run_configuration(gpus, args.workers, worker_args)
    if not rows:
        print("error: no timings: every worker failed (are the GPUs visible?)", file=sys.stderr)
        return 1
    for name, figures in summary(rows).items():
        print(f"{name:<30} wall {_milliseconds(figures['wall_s'])} ms (p90 {_milliseconds(figures['wall_p90_s'])})  "
              f"cpu {_milliseconds(figures['cpu_s'])} ms  ({figures['n']} steps)")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
