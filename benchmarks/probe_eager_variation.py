"""What makes PyTorch eager's time differ from one process to the next (timing reproducibility)?

Each task is timed in several fresh processes, one after another on an otherwise idle GPU, the way a timing
window times eager (`timing.CallTimer`: rotating input sets through the same buffers, L2 flush, events with a
device-wide sync). Each process measures twice: on its first allocations and again on fresh ones, so a
difference *within* a process (memory placement) can be told from one *between* processes (a per-process
choice: the library's algorithm, its workspace). Each measurement also records the kernels one call launched
(torch.profiler) and the SM clock and temperature that `nvidia-smi` reported around it.

With --placements K each process also times eager with its inputs at K random places in one large allocation
(4 KiB-aligned offsets): the spread over places within a process against that of their median between processes
says whether timing over several places would make eager's figure reproducible. With --arenas N it does that in N
allocations, a 2 GiB one kept between each two, cuBLAS's workspaces freed and the earlier arenas' outputs and flush
buffers held, so each arena's inputs, outputs and flush buffer lie elsewhere in the device's memory: whether a
process's speed belongs to the process or to where its memory happens to be.

    python benchmarks/probe_eager_variation.py [--tasks 1/2,1/10] [--processes 6] [--calls 100] [--placements K]
                                               [--arenas N] [--launch-hidden] [--pin] [--out F.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_TASKS = "1/2,1/10,1/11,1/12,1/13"


def gpu_state() -> dict[str, float] | None:
    """SM clock (MHz), temperature (C) and power (W) as nvidia-smi reports them now (None without it)."""
    query = ["nvidia-smi", "--query-gpu=clocks.sm,temperature.gpu,power.draw", "--format=csv,noheader,nounits"]
    try:
        line = subprocess.run(query, capture_output=True, text=True, timeout=10, check=True).stdout.splitlines()[0]
        sm, temperature, power = (float(part) for part in line.split(","))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    return {"sm_mhz": sm, "temperature_c": temperature, "power_w": power}


def kernels_of_one_call(call) -> list[str]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    return sorted({event.name for event in prof.events() if event.device_type == torch.autograd.DeviceType.CUDA})


def measure_once(module, seeds: list[int], calls: int, keep: list) -> dict:
    import torch

    from builder import config
    from builder.verify.child.timing import CallTimer, build_input_sets

    sets = build_input_sets(module, seeds, "cuda", lambda model, seed: model, with_reference=False)
    timer = CallTimer(sets, "cuda", atol=1.0, rtol=1.0)
    with torch.no_grad():
        for _ in range(config.WARMUP_CALLS):
            timer.time_call()
        before = gpu_state()
        samples = [timer.time_call() for _ in range(calls)]
        after = gpu_state()
        kernels = kernels_of_one_call(lambda: sets[0].call(*timer.live))
    pointers = [t.data_ptr() % (2 << 20) for t in timer.live if isinstance(t, torch.Tensor)]
    keep.append((sets, timer))  # held: the next measurement gets new memory, not these blocks again
    return {"median_ms": statistics.median(samples), "min_ms": min(samples), "kernels": kernels,
            "gpu_before": before, "gpu_after": after, "input_offsets_in_2mib": pointers}  # fmt: skip


def measure_launch_hidden(module, seeds: list[int], calls: int) -> dict:
    """Eager timed as `timing.CallTimer` does, but with the GPU kept busy (`torch.cuda._sleep`, about 1 ms) while
    the host launches the call: the start event then fires when the GPU reaches the call, so the interval holds
    the GPU's work and not the host's launch time (`median_ms`); the same with the end event recorded on the stream
    before the host syncs (`stream_median_ms`: no host wake-up inside); and the host's time to launch one call."""
    import time

    import torch

    from builder import config
    from builder.verify.child.timing import CallTimer, build_input_sets

    sets = build_input_sets(module, seeds, "cuda", lambda model, seed: model, with_reference=False)
    timer = CallTimer(sets, "cuda", atol=1.0, rtol=1.0)

    def one(index: int, end_on_stream: bool) -> tuple[float, float]:
        for buffer, value in zip(timer.live, sets[index % len(sets)].inputs, strict=True):
            if isinstance(buffer, torch.Tensor):
                buffer.copy_(value)
        timer.flush.fill_(index % 7)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(2_000_000)
        start.record()
        began = time.perf_counter()
        sets[index % len(sets)].call(*timer.live)
        launched = time.perf_counter()
        if not end_on_stream:
            torch.cuda.synchronize()
        end.record()
        end.synchronize()
        return start.elapsed_time(end), (launched - began) * 1e3

    hidden, launch_ms, stream_ms = [], [], []
    with torch.no_grad():
        for index in range(config.WARMUP_CALLS + calls):
            gpu, launch = one(index, end_on_stream=False)
            on_stream, _ = one(index, end_on_stream=True)
            if index >= config.WARMUP_CALLS:
                hidden.append(gpu)
                launch_ms.append(launch)
                stream_ms.append(on_stream)
    return {"median_ms": statistics.median(hidden), "launch_median_ms": statistics.median(launch_ms),
            "stream_median_ms": statistics.median(stream_ms)}  # fmt: skip


def measure_placed(module, seeds: list[int], calls: int, placements: int, keep: list | None = None) -> list[dict]:
    """Eager timed with its input buffers at `placements` random places in one allocation, `calls` calls each.
    Into `keep` go the allocation, the timer (its cache-flush buffer) and one output: held, so that the next
    call's outputs and flush buffer are not served from the same blocks again."""
    import random

    import torch

    from builder.verify.child.timing import CallTimer, build_input_sets

    sets = build_input_sets(module, seeds, "cuda", lambda model, seed: model, with_reference=False)
    timer = CallTimer(sets, "cuda", atol=1.0, rtol=1.0)
    tensors = [t for t in timer.live if isinstance(t, torch.Tensor)]
    if len(tensors) != len(timer.live) or not all(t.is_contiguous() for t in tensors):
        return []
    page = 4096
    sizes = [-(-t.numel() * t.element_size() // page) * page for t in tensors]
    arena = torch.empty(3 * sum(sizes) + (64 << 20), dtype=torch.uint8, device="cuda")
    slack_pages = (arena.numel() - sum(sizes)) // page
    rng = random.Random()
    results = []
    with torch.no_grad():
        for _ in range(placements):
            cuts = sorted(rng.randrange(slack_pages + 1) for _ in tensors)
            gaps = [cut - previous for previous, cut in zip([0, *cuts[:-1]], cuts, strict=True)]
            live, cursor, offsets = [], 0, []
            for tensor, size, gap in zip(tensors, sizes, gaps, strict=True):
                start = cursor + gap * page  # a random free stretch before each buffer
                view = arena[start : start + tensor.numel() * tensor.element_size()]
                live.append(view.view(tensor.dtype).view(tensor.shape))
                offsets.append(start)
                cursor = start + size
            timer.live = live
            for _ in range(3):
                timer.time_call()
            samples = [timer.time_call() for _ in range(calls)]
            results.append({"median_ms": statistics.median(samples), "offsets": offsets})
        if keep is not None:
            keep.append((arena, timer, sets[0].call(*timer.live)))
    return results


def measure_arenas(module, seeds: list[int], calls: int, placements: int, arenas: int) -> list[list[dict]]:
    """`measure_placed` in `arenas` allocations, each after a 2 GiB spacer and with cuBLAS's workspaces freed; the
    earlier arenas' outputs and flush buffers are held, so each arena's are new blocks too."""
    import torch

    spacers, results, held = [], [], []
    for index in range(arenas):
        if index:
            spacers.append(torch.empty(2 << 30, dtype=torch.uint8, device="cuda"))
            torch._C._cuda_clearCublasWorkspaces()
        results.append(measure_placed(module, seeds, calls, placements, held))
    return results


def child(task_spec: str, calls: int, placements: int = 0, arenas: int = 1, launch_hidden: bool = False) -> None:
    """One fresh process: the task's eager, measured on two sets of allocations (and at random places)."""
    import torch

    from builder.tasks import load_task_module, resolve_task

    module = load_task_module(resolve_task(task_spec))
    seeds = [1234, 5678]
    torch.cuda.init()  # PyTorch's default settings, as a timing window times eager
    held: list = []
    first = measure_once(module, seeds, calls, held)
    second = measure_once(module, seeds, calls, held)
    hidden = measure_launch_hidden(module, seeds, calls) if launch_hidden else None
    arena_runs = measure_arenas(module, seeds, max(calls // 3, 10), placements, arenas) if placements else []
    placed = arena_runs[0] if arena_runs else []
    print(json.dumps({"task": task_spec, "first": first, "second": second, "placed": placed, "arenas": arena_runs,
                      "launch_hidden": hidden, "cpus": sorted(os.sched_getaffinity(0))}))  # fmt: skip


def summarise(task: str, runs: list[dict]) -> dict:
    medians = [run[which]["median_ms"] for run in runs for which in ("first", "second")]
    within = [abs(run["first"]["median_ms"] / run["second"]["median_ms"] - 1) for run in runs]
    by_kernels: dict[str, list[float]] = {}
    for run in runs:
        for which in ("first", "second"):
            by_kernels.setdefault(" | ".join(run[which]["kernels"]), []).append(run[which]["median_ms"])
    return {
        "task": task,
        "processes": len(runs),
        "median_ms_range": [min(medians), max(medians)],
        "between_processes_max_over_min": max(medians) / min(medians),
        "within_process_max_rel_diff": max(within),
        "kernel_sets": {names: {"n": len(ms), "median_ms": statistics.median(ms)} for names, ms in by_kernels.items()},
        **_placement_summary(runs),
        **_launch_summary(runs),
        "sm_mhz": sorted({(run[w]["gpu_after"] or {}).get("sm_mhz") for run in runs for w in ("first", "second")}),
    }


def _launch_summary(runs: list[dict]) -> dict:
    """Per process (and its CPUs): eager as windows time it, with the host's launch hidden, and the launch alone."""
    hidden = [
        (run["first"]["median_ms"], run["launch_hidden"], run.get("cpus")) for run in runs if run.get("launch_hidden")
    ]
    if not hidden:
        return {}
    gpu = [h["median_ms"] for _, h, _ in hidden]
    return {
        "per_process_window_vs_hidden_vs_stream_vs_launch_ms": [
            [round(w, 4), round(h["median_ms"], 4), round(h["stream_median_ms"], 4), round(h["launch_median_ms"], 4),
             cpus] for w, h, cpus in hidden],
        "launch_hidden_between_processes_max_over_min": max(gpu) / min(gpu),
        "stream_between_processes_max_over_min": max(h["stream_median_ms"] for _, h, _ in hidden)
        / min(h["stream_median_ms"] for _, h, _ in hidden),
    }  # fmt: skip


def _placement_summary(runs: list[dict]) -> dict:
    """Spread over places within each process, and of each process's median over its places between them."""
    per_process = [[place["median_ms"] for place in run.get("placed") or []] for run in runs]
    per_process = [medians for medians in per_process if medians]
    if not per_process:
        return {}
    of_process = [statistics.median(medians) for medians in per_process]
    by_arena = [[statistics.median(p["median_ms"] for p in arena) for arena in run.get("arenas") or [] if arena]
                for run in runs]  # fmt: skip
    by_arena = [medians for medians in by_arena if len(medians) > 1]
    arenas = {}
    if by_arena:
        of_arenas = [statistics.median(medians) for medians in by_arena]
        arenas = {
            "arena_medians_per_process_ms": [[round(m, 4) for m in medians] for medians in by_arena],
            "arenas_within_process_max_over_min": [round(max(m) / min(m), 3) for m in by_arena],
            "arenas_median_between_processes_max_over_min": max(of_arenas) / min(of_arenas),
        }
    return {
        **arenas,
        "placed_within_process_max_over_min": [round(max(m) / min(m), 3) for m in per_process],
        "placed_median_per_process_ms": [round(m, 4) for m in of_process],
        "placed_between_processes_max_over_min": max(of_process) / min(of_process),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=DEFAULT_TASKS)
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--placements", type=int, default=0)
    parser.add_argument("--arenas", type=int, default=1)
    parser.add_argument(
        "--launch-hidden",
        action="store_true",
        help="also time eager with the host's launch hidden behind a GPU sleep, and the launch alone",
    )
    parser.add_argument("--pin", action="store_true", help="process i runs on CPU i (mod the CPUs): placement by core")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.calls, args.placements, args.arenas, args.launch_hidden)
        return 0
    report = {"runs": {}, "summary": []}
    for task in args.tasks.split(","):
        runs = []
        cpus = sorted(os.sched_getaffinity(0))
        for index in range(args.processes):
            argv = [sys.executable, __file__, "--child", task, "--calls", str(args.calls),
                    "--placements", str(args.placements), "--arenas", str(args.arenas)]  # fmt: skip
            argv += ["--launch-hidden"] if args.launch_hidden else []
            if args.pin:
                argv = ["taskset", "-c", str(cpus[index * 2 % len(cpus)]), *argv]  # every other CPU: other cores
            done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                print(f"{task}: a process failed: {done.stderr.strip()[-500:]}", file=sys.stderr)
                continue
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        if not runs:
            continue
        report["runs"][task] = runs
        summary = summarise(task, runs)
        report["summary"].append(summary)
        print(json.dumps(summary, indent=1), flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
