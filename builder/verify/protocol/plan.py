"""What the parent asks of a child and how both sides count it (both sides import it): the trials' and the timing
sets' seeds, the timing knobs a job carries, the size of a timing block, the figures kept of a set of samples and
the words of a record's `timing_method`, and what a candidate's child may see of the clean reference's manifest.
"""

from __future__ import annotations

import hashlib
import math
import secrets
import statistics
from typing import Any

from builder import config


def trial_seeds(job: dict[str, Any]) -> list[int]:
    """The job's seeds, extended by hashing when more trials than seeds are asked for."""
    seeds = [int(s) for s in job.get("seeds") or []]
    if not seeds:  # the parent always sends secret seeds; never fall back to a fixed one
        seeds = [secrets.randbits(config.SEED_BITS)]
    trials = max(int(job.get("trials") or config.DEFAULT_TRIALS), len(seeds), 1)
    while len(seeds) < trials:
        digest = hashlib.sha256(f"{seeds[0]}:{len(seeds)}".encode()).digest()
        seeds.append(int.from_bytes(digest[:8], "big") >> 1)
    return seeds


def runtime_stats(samples_ms: list[float]) -> dict[str, Any]:
    return {"median_ms": statistics.median(samples_ms), "mean_ms": statistics.fmean(samples_ms),
            "std_ms": statistics.stdev(samples_ms) if len(samples_ms) > 1 else 0.0, "min_ms": min(samples_ms),
            "max_ms": max(samples_ms), "n": len(samples_ms)}  # fmt: skip


def block_rule() -> str:  # how a block's size and the least timed work were chosen, for `timing_method`
    return (f" (as many as fill {config.TIMING_BLOCK_MS:g} ms, from the warm-up's median; at least "
            f"{config.MIN_TIMED_CALLS} timed calls or {config.MIN_TIMED_MS:g} ms of them)")  # fmt: skip


def describe_method(
    device: str, warmup_calls: int, n: int, n_sets: int, window_warmup_calls: int = 0, fresh_inputs: bool = False
) -> str:
    if device == "cuda":
        how = (
            "CUDA events on the current stream around each call, the device spinning while the host launches it "
            "(the host's launch and synchronize stay out of the interval), torch.cuda.synchronize() after each call; "
            f"{config.L2_FLUSH_BYTES >> 20} MiB L2 flush write before each call"
        )
    else:
        how = f"time.perf_counter around each call; {config.CPU_CACHE_FLUSH_BYTES >> 20} MiB cache flush write before each call"
    warmup = f"{warmup_calls} warm-up calls excluded"
    if window_warmup_calls:
        warmup = (f"{warmup_calls} warm-up calls before the window (device shared) and {window_warmup_calls} in it, "
                  "excluded")  # fmt: skip
    if fresh_inputs:
        return f"{how}; {warmup}; {n} timed calls on {n_sets} models, each on fresh inputs copied into the same buffers"
    return (
        f"{how}; {warmup}; {n} timed calls rotating {n_sets} input sets "
        "through the same buffers; every timed output checked against its reference"
    )


def spin_ms_for(launch_ms: list[float]) -> float:
    """Twice the median of the recent launch times, within config.LAUNCH_SPIN_MIN_MS..LAUNCH_SPIN_MAX_MS."""
    recent = statistics.median(launch_ms[-5:]) if launch_ms else config.LAUNCH_SPIN_MAX_MS
    return min(max(2 * recent, config.LAUNCH_SPIN_MIN_MS), config.LAUNCH_SPIN_MAX_MS)


def calls_per_block(call_ms: float, most: int) -> int:
    """Calls (or pairs) per block: as many as fill config.TIMING_BLOCK_MS at `call_ms` each, from one to `most`.
    A slow kernel's call is a steady median on its own; ten of a 70 ms kernel cost the device 0.7 s a block."""
    if not call_ms > 0:
        return most
    return max(1, min(most, math.ceil(config.TIMING_BLOCK_MS / call_ms)))


def relative_spread(values: list[float]) -> float:
    """Interquartile range over median (inf for fewer than two values)."""
    if len(values) < 2:
        return float("inf")
    low, _, high = statistics.quantiles(values, n=4, method="inclusive")
    return (high - low) / max(abs(statistics.median(values)), 1e-12)


def timing_seeds(job: dict[str, Any]) -> list[int]:
    """Seeds for the timing input sets, derived from the job's secret seeds but different from every
    trial's, so timed inputs were never seen (and cached) during the checks."""

    base = trial_seeds(job)[0]
    seeds = []
    for index in range(max(config.INPUT_SETS, 2)):
        digest = hashlib.sha256(f"timing:{base}:{index}".encode()).digest()
        seeds.append(int.from_bytes(digest[:8], "big") >> 1)
    return seeds


def job_counts(job: dict[str, Any]) -> dict[str, Any]:
    """The timing knobs a job carries (the parent sets them; config gives the defaults)."""
    return {
        "warmup_calls": int(job.get("warmup_calls") or config.WARMUP_CALLS),
        "timed_calls": int(job.get("timed_calls") or config.TIMED_CALLS),
        "budget_s": float(job.get("timing_budget_s") or config.TIMING_BUDGET_S),
        "min_calls": min(config.MIN_TIMED_CALLS, int(job.get("timed_calls") or config.TIMED_CALLS)),
    }


# What a candidate's child is told of the clean reference: sizes, shapes, responsive targets and seeds; no values.
PUBLIC_MANIFEST_KEYS = ("output_bytes", "output_shapes", "responsive_targets", "probe_seed", "timing_sets", "error")


def public_manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    return {key: manifest.get(key) for key in PUBLIC_MANIFEST_KEYS}
