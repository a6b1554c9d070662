"""Where a throughput pass runs (the first N visible GPUs, on some of the bench's cores), how passes on more GPUs
scale against one, and whether two passes over the same mix gave the same verdicts and speedups."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

from benchmarks.compare_builds import compare, compared_fields
from builder import config
from builder.verify.engine.device_gate import keep_timing_cores
from builder.verify.sandbox.cores import move_this_process

SCALED_RATES = {"VERIFIED KERNELS/HOUR": "over the run", "kernels/hour after the first evaluated record":
                "after the first evaluated record", "kernels/hour from the 25 % to the 75 % record": "25-75 %"}  # fmt: skip


class Place(NamedTuple):
    """A pass's place: the first `gpus` visible GPUs, and `cores_per_gpu` of the bench's cores for each (the first
    ones; None: all of them). "1@16" against "2" on a 32-core box is one 16-core GPU box against the box."""

    gpus: int
    cores_per_gpu: int | None = None

    def cores(self, own: list[int]) -> list[int]:
        return own[: self.gpus * self.cores_per_gpu] if self.cores_per_gpu else own

    def fits(self, visible: list[str], own: list[int]) -> bool:
        return self.gpus <= len(visible) and len(self.cores(own)) >= self.gpus * (self.cores_per_gpu or 1)


def places_that_fit(places: list[Place], visible: list[str], own: list[int], kind: str) -> Iterator[Place]:
    """The places this machine has room for, in order; a line for each one skipped (`kind`: the passes' name)."""
    for place in places:
        if place.fits(visible, own):
            yield place
        else:
            print(f"{kind}, {place.gpus} GPUs on {place.cores_per_gpu or 'all'} cores each: skipped, "
                  f"{len(visible)} visible, {len(own)} cores", flush=True)  # fmt: skip


def place_name(place: Place, visible: list[str], cores: list[int]) -> str:
    return f"{place.gpus} GPU{'s' if place.gpus > 1 else ''} ({','.join(visible[: place.gpus])}) on {len(cores)} cores"


def parse_places(text: str) -> list[Place]:
    """Comma-separated GPU counts, each optionally @cores per GPU ("1@16,2"); ValueError if not."""
    places = []
    for item in filter(None, text.split(",")):
        gpus, at, cores = item.partition("@")
        place = Place(int(gpus), int(cores) if at else None)
        if place.gpus < 1 or (place.cores_per_gpu is not None and place.cores_per_gpu < 1):
            raise ValueError(item)
        places.append(place)
    return places


@contextmanager
def on_place(place: Place, visible: list[str], own: list[int]) -> Iterator[list[int]]:
    """This process (and the engines it starts) on the place's GPUs and cores until the block ends; yields the
    cores. Every pass starts on the cores it is given: a one-GPU pass's kept timing cores are given back after it,
    or the next pass would start without them."""
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    cores = place.cores(own)
    keep_timing_cores(0, 0)  # an in-process pass before this one kept some
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(visible[: place.gpus])
    move_this_process(set(cores))
    try:
        yield cores
    finally:
        keep_timing_cores(0, 0)
        move_this_process(set(own))
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


def scaling_lines(rates: dict[tuple[int, int], dict[str, float]]) -> list[str]:
    """Each several-GPU pass's rates over each one-GPU pass's, from one mix ({(GPUs, cores): {rate name:
    kernels/hour}}): over the run, after the first evaluated record, and from the 25 % to the 75 % record (none
    without a one-GPU pass)."""
    lines = []
    for (count, cores), figures in sorted(rates.items()):
        for (one_count, one_cores), one in sorted(rates.items()):
            if count < 2 or one_count != 1:
                continue
            parts = [f"{label} {figures[name] / one[name]:.2f}x" for name, label in SCALED_RATES.items()
                     if one.get(name, 0) > 0 and math.isfinite(figures.get(name, math.nan))]  # fmt: skip
            if parts:
                lines.append(f"{count} GPUs on {cores} cores against 1 on {one_cores}: " + ", ".join(parts))
    return lines


def pass_agreement(first: list, second: list) -> dict[str, float]:
    """Two passes over one mix (kernels matched by task and name; cold passes build their own copies under the same
    names), compared as two builds are (`compare_builds.compare`): how many kernels both passes judged, how many got
    the same status and flags, and how many kernels correct in both have speedups over eager within re-verification's
    tolerance of each other."""
    one, other = ({(r.task_id, r.kernel_name): compared_fields(r) for r in records} for records in (first, second))
    result = compare(one, other)
    tolerance = config.REVERIFY_SPEEDUP_TOLERANCE
    return {"kernels in both passes": result["in_both"],
            "same status and flags": result["in_both"] - len(result["status_differs"]) - len(result["flags_differ"]),
            "correct in both": result["correct_in_both"],
            f"speedups within {tolerance:.0%} of each other":
                result["correct_in_both"] - len(result["speedups_outside"]),
            "largest speedup gap %": result["largest_gap"] * 100}  # fmt: skip
