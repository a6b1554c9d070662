"""gpu_places.py: where a throughput pass runs, how passes scale against one GPU, and whether two passes agree."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from benchmarks import gpu_places
from benchmarks.gpu_places import Place, parse_places


def test_two_gpus_rates_are_read_against_one_gpus_from_the_same_pass():
    one = {"VERIFIED KERNELS/HOUR": 3500.0, "kernels/hour after the first evaluated record": 3750.0,
           "kernels/hour from the 25 % to the 75 % record": 4900.0, "wall s": 98.0}  # fmt: skip
    two = {"VERIFIED KERNELS/HOUR": 5250.0, "kernels/hour after the first evaluated record": 6900.0,
           "kernels/hour from the 25 % to the 75 % record": float("nan"), "wall s": 66.0}  # fmt: skip
    assert gpu_places.scaling_lines({(1, 16): one, (2, 32): two}) == [
        "2 GPUs on 32 cores against 1 on 16: over the run 1.50x, after the first evaluated record 1.84x"
    ]  # nan: left out
    assert gpu_places.scaling_lines({(2, 32): two}) == []  # nothing to scale by
    assert gpu_places.scaling_lines({(1, 16): one}) == []
    wider = dict(one, **{"VERIFIED KERNELS/HOUR": 3750.0})  # one GPU given all 32 cores
    assert gpu_places.scaling_lines({(1, 16): one, (1, 32): wider, (2, 32): two}) == [
        "2 GPUs on 32 cores against 1 on 16: over the run 1.50x, after the first evaluated record 1.84x",
        "2 GPUs on 32 cores against 1 on 32: over the run 1.40x, after the first evaluated record 1.84x",
    ]


def test_places_name_gpus_and_the_cores_each_gets():
    assert parse_places("1@16,2,1") == [Place(1, 16), Place(2), Place(1)]
    assert parse_places("") == []
    for bad in ("0", "1@0", "two", "1@", "1@x"):
        with pytest.raises(ValueError):
            parse_places(bad)
    own = list(range(32))
    assert Place(1, 16).cores(own) == own[:16] and Place(2).cores(own) == own
    assert Place(2, 16).fits(["0", "1"], own) and not Place(3).fits(["0", "1"], own)
    assert not Place(2, 16).fits(["0", "1"], own[:24])


def test_a_place_holds_its_gpus_and_cores_for_the_block_and_gives_them_back(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    own = sorted(os.sched_getaffinity(0))
    with gpu_places.on_place(Place(2, 1), ["0", "1", "2", "3"], own) as cores:
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"
        assert cores == own[:2] and sorted(os.sched_getaffinity(0)) == own[:2]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and sorted(os.sched_getaffinity(0)) == own
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with pytest.raises(RuntimeError):
        with gpu_places.on_place(Place(1), ["0"], own):
            raise RuntimeError("a pass that fails")
    assert "CUDA_VISIBLE_DEVICES" not in os.environ and sorted(os.sched_getaffinity(0)) == own


def record(task_id: str, name: str, status: str, speedup: float | None = None, flags=()) -> SimpleNamespace:
    return SimpleNamespace(task_id=task_id, kernel_name=name, status=status, speedup_eager=speedup, flags=list(flags))


def test_two_passes_agree_kernel_by_kernel_on_status_flags_and_speedup():
    one = [record("1/1", "tiled-0", "correct", 2.0), record("1/1", "tiled-16", "correct", 1.0),
           record("1/2", "naive-1", "incorrect"), record("1/3", "fast-2", "correct", 1.0),
           record("1/3", "racy-3", "correct", 1.0), record("1/4", "only-here-4", "correct", 1.0)]  # fmt: skip
    four = [record("1/1", "tiled-0", "correct", 2.08), record("1/1", "tiled-16", "correct", 1.2),
            record("1/2", "naive-1", "incorrect"), record("1/3", "fast-2", "incorrect"),
            record("1/3", "racy-3", "correct", 1.0, ["side_stream"]), record("2/1", "tiled-0", "correct", 1.0)]  # fmt: skip
    figures = gpu_places.pass_agreement(one, four)
    assert figures == {"kernels in both passes": 5, "same status and flags": 3, "correct in both": 3,
                       "speedups within 5% of each other": 2, "largest speedup gap %": pytest.approx(20.0)}  # fmt: skip
    assert gpu_places.pass_agreement(one, [])["kernels in both passes"] == 0


def test_places_the_machine_lacks_are_skipped_with_a_line(capsys):
    own = list(range(16))
    fitting = list(gpu_places.places_that_fit([Place(1), Place(4), Place(2, 8)], ["0", "1"], own, "cold"))
    assert fitting == [Place(1), Place(2, 8)]
    assert capsys.readouterr().out == "cold, 4 GPUs on all cores each: skipped, 2 visible, 16 cores\n"
    assert gpu_places.place_name(Place(2, 8), ["3", "5", "7"], own[:16]) == "2 GPUs (3,5) on 16 cores"
