"""What does a task's torch.compile baseline cost the machine's cores while it is built?

A build's baselines are built in parallel children while the first shared compiles and clean references
run (`BaselineCache.prewarm`): every core-second they take is one the first evaluations wait for. Each task is
compiled with inductor in a fresh process, once per setting of inductor's compile threads (its worker
pool), several at a time as a build runs them. The cores' busy time comes from /proc/stat over each setting's
builds (the pool's workers are not the build's waited-for children, so its own rusage misses them): run it on an
otherwise idle machine.

    python benchmarks/probe_baseline_compile.py [--tasks 1/2,2/1,3/1] [--threads default,1] [--parallel 4]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TASKS = "1/2,1/10,2/1,2/2,2/3,3/1,3/2,3/3"

ONE_BUILD = """
import json, resource, sys, time
started = time.monotonic()
import torch
from builder.tasks import load_suite
from builder.tasks.loading import instantiate, load_task_module
device = "cuda" if torch.cuda.is_available() else "cpu"
task = load_suite().get(sys.argv[1])
model, inputs = instantiate(load_task_module(task, "full" if device == "cuda" else "cpu"), 0, device)
compiled = torch.compile(model)
with torch.no_grad():
    compiled(*inputs)
if device == "cuda":
    torch.cuda.synchronize()
own = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": time.monotonic() - started, "own_cpu_s": own.ru_utime + own.ru_stime,
                  "compile_threads": torch._inductor.config.compile_threads}))
"""


def busy_core_seconds() -> float:
    """Every core's busy time since boot (user, nice, system, irq, softirq, steal), from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def build_once(task_id: str, threads: str) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    env.pop("TORCHINDUCTOR_COMPILE_THREADS", None)
    if threads != "default":
        env["TORCHINDUCTOR_COMPILE_THREADS"] = threads
    with tempfile.TemporaryDirectory() as cache:  # cold: no inductor or triton cache shared between builds
        env.update(TORCHINDUCTOR_CACHE_DIR=f"{cache}/inductor", TRITON_CACHE_DIR=f"{cache}/triton")
        done = subprocess.run([sys.executable, "-c", ONE_BUILD, task_id], env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=900)  # fmt: skip
    if done.returncode != 0:
        return {"task": task_id, "error": done.stderr.strip().splitlines()[-1:]}
    return {"task": task_id, **json.loads(done.stdout.strip().splitlines()[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=DEFAULT_TASKS)
    parser.add_argument("--threads", default="default,1", help="settings of inductor's compile threads to compare")
    parser.add_argument("--parallel", type=int, default=4, help="builds at once (a build's baseline workers)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    tasks = [t for t in args.tasks.split(",") if t]
    report = {}
    for threads in args.threads.split(","):
        started, busy = time.monotonic(), busy_core_seconds()
        with ThreadPoolExecutor(args.parallel) as pool:
            runs = list(pool.map(lambda task_id, threads=threads: build_once(task_id, threads), tasks))
        good = [r for r in runs if "error" not in r]
        cpu = busy_core_seconds() - busy
        report[threads] = {"wall_s": time.monotonic() - started, "busy_core_s": cpu, "runs": runs}
        print(f"compile threads {threads:>7}: {len(good)}/{len(runs)} built in {report[threads]['wall_s']:.1f} s, "
              f"{args.parallel} at once; machine's busy core-s per task {cpu / max(1, len(runs)):.1f} "
              f"(own {sum(r['own_cpu_s'] for r in good) / max(1, len(good)):.1f}); wall s per task "
              f"{sum(r['wall_s'] for r in good) / max(1, len(good)):.1f}", flush=True)  # fmt: skip
        for run in runs:
            if "error" in run:
                print(f"  {run['task']}: {run['error']}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
