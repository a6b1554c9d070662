"""Does PyTorch eager slow down as the GPU works (power or heat), rather than from one process to the next?

Times a task's eager the way a timing window does (`timing.CallTimer`), in blocks of calls, for a while after an
idle pause, while `nvidia-smi` samples the SM clock, power, temperature and the active clock-event reasons every
100 ms. Prints each block's median beside what the GPU reported during it.

    python benchmarks/probe_gpu_heat.py [--tasks 1/2,1/13] [--seconds 20] [--idle 5] [--out F.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

QUERY = "timestamp,clocks.sm,power.draw,temperature.gpu,temperature.memory,clocks_event_reasons.active"


def sampler(path: Path) -> subprocess.Popen | None:
    try:
        return subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-lms", "100"],
                                stdout=path.open("w"), stderr=subprocess.DEVNULL)  # fmt: skip
    except OSError:
        return None


def samples_between(path: Path, start: float, end: float) -> dict:
    """Medians (and the set of event reasons) of the samples taken between two epoch times."""
    rows = []
    for line in path.read_text().splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 6:
            continue
        try:
            stamp = time.mktime(time.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S"))
            rows.append((stamp, float(parts[1]), float(parts[2]), float(parts[3]), parts[4], parts[5]))
        except ValueError:
            continue
    inside = [row for row in rows if start - 1 <= row[0] <= end]
    if not inside:
        return {}
    return {"sm_mhz_min": min(r[1] for r in inside), "sm_mhz_median": statistics.median(r[1] for r in inside),
            "power_w_max": max(r[2] for r in inside), "temperature_c": max(r[3] for r in inside),
            "memory_c": inside[-1][4], "reasons": sorted({r[5] for r in inside})}  # fmt: skip


def run_task(task_spec: str, seconds: float, idle: float, smi_log: Path) -> list[dict]:
    import torch

    from builder.tasks import load_task_module, resolve_task
    from builder.verify.child.timing import CallTimer, build_input_sets

    module = load_task_module(resolve_task(task_spec))
    sets = build_input_sets(module, [1234, 5678], "cuda", lambda model, seed: model, with_reference=False)
    timer = CallTimer(sets, "cuda", atol=1.0, rtol=1.0)
    with torch.no_grad():
        for _ in range(5):
            timer.time_call()
        time.sleep(idle)  # the GPU idles, as it does while a child starts
        blocks, started = [], time.time()
        while time.time() - started < seconds:
            begin = time.time()
            samples = [timer.time_call() for _ in range(20)]
            blocks.append({"t_s": round(begin - started, 2), "median_ms": statistics.median(samples),
                           "begin": begin, "end": time.time()})  # fmt: skip
    for block in blocks:
        block.update(samples_between(smi_log, block.pop("begin"), block.pop("end")))
    return blocks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="1/2,1/13")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--idle", type=float, default=5.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    smi_log = Path(tempfile.mkstemp(suffix=".csv")[1])
    smi = sampler(smi_log)
    report = {}
    try:
        for task in args.tasks.split(","):
            blocks = run_task(task, args.seconds, args.idle, smi_log)
            report[task] = blocks
            medians = [b["median_ms"] for b in blocks]
            print(f"{task}: {len(blocks)} blocks, first {medians[0]:.4f} ms, last {medians[-1]:.4f} ms, "
                  f"max/min {max(medians) / min(medians):.3f}")  # fmt: skip
            for block in blocks[:: max(1, len(blocks) // 12)]:
                print("   ", json.dumps(block))
    finally:
        if smi is not None:
            smi.terminate()
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
