"""`engine/one_kernel.finish_record`'s second look at a CUDA window whose PyTorch eager was slowed: the kernel is
evaluated again in a fresh child, and only an eager slowed in both evaluations disqualifies it. Short of that, on
either backend, the speedup's eager is held to 10 % above the clean one."""

from __future__ import annotations

from typing import Any

import pytest

from builder.candidates import Candidate
from builder.tasks import load_suite
from builder.verify.compile.extension import CompileResult
from builder.verify.engine.one_kernel import Evaluated, finish_record
from builder.verify.judge import verdict
from builder.verify.options import VerifyOptions

CLEAN = {"eager_ms": 0.0079, "eager_runtime": {"median_ms": 0.0079, "min_ms": 0.0075}, "compile_ms": 0.02}
SLOWED_WINDOW = {"median_ms": 0.0302, "min_ms": 0.0121}  # the first look of a launch-bound control, measured
HONEST_WINDOW = {"median_ms": 0.0081, "min_ms": 0.0076}


class CleanBaselines:
    """A task's baseline as a clean process measured it (the parent's `BaselineCache`, without children)."""

    def get(self, task: Any, options: Any, refresh: bool = False) -> dict[str, Any]:
        return CLEAN


@pytest.fixture(scope="module")
def task():
    return load_suite().get("1/1")


def evaluated(task, backend: str, eager_window: dict[str, float], again=None) -> Evaluated:
    candidate = Candidate(task_id=task.id, kernel_name="launch_bound", language="python", source="# ModelNew\n",
                          generator="test")  # fmt: skip
    result = {"status": "correct", "flags": [], "runtime": {"median_ms": 0.0078, "min_ms": 0.0074, "n": 100},
              "eager_window": eager_window, "speedup_blocks": [1.0, 1.0], "timing_method": "refereed window"}  # fmt: skip
    return Evaluated(candidate=candidate, task=task, options=VerifyOptions(backend=backend), status="correct",
                     compiled=CompileResult(ok=True), base=verdict.base_fields(candidate, task, backend),
                     result=result, again=again)  # fmt: skip


def test_an_eager_slowed_once_on_cuda_is_looked_at_again_and_the_second_look_stands(task):
    looks: list[str] = []

    def again() -> Evaluated:
        looks.append("again")
        return evaluated(task, "cuda", HONEST_WINDOW, again=lambda: pytest.fail("a third look"))

    record = finish_record(evaluated(task, "cuda", SLOWED_WINDOW, again), CleanBaselines())
    assert looks == ["again"]
    assert record.status == "correct" and "slowed_baseline" not in record.flags
    assert record.eager_ms == pytest.approx(0.0081)  # the second window's eager, none of the first's
    assert "evaluated twice, each in a fresh child: the first window's PyTorch eager was slowed" in record.timing_method
    assert "0.0302 ms a call (fastest 0.0121 ms)" in record.timing_method


def test_an_eager_slowed_in_both_looks_is_slowed_baseline(task):
    def again() -> Evaluated:
        return evaluated(task, "cuda", {"median_ms": 0.031, "min_ms": 0.0125}, again=lambda: pytest.fail("a third"))

    record = finish_record(evaluated(task, "cuda", SLOWED_WINDOW, again), CleanBaselines())
    assert record.status == "incorrect" and "slowed_baseline" in record.flags
    assert "0.031 ms a call" in record.error and "in the first evaluation, PyTorch eager took 0.0302 ms" in record.error


def test_a_window_without_slowed_eager_and_the_cpu_are_judged_on_one_look(task):
    def again() -> Evaluated:
        raise AssertionError("evaluated again")

    honest = finish_record(evaluated(task, "cuda", HONEST_WINDOW, again), CleanBaselines())
    assert honest.status == "correct" and "evaluated twice" not in honest.timing_method
    slowed_twice_over = {"median_ms": 0.05, "min_ms": 0.04}  # the CPU's tolerance is wider: its eager waits for cores
    on_the_cpu = finish_record(evaluated(task, "cpu", slowed_twice_over, again), CleanBaselines())  # the clean eager
    assert on_the_cpu.status == "correct" and on_the_cpu.eager_ms == pytest.approx(0.0079)


def test_a_second_look_that_ends_otherwise_keeps_its_own_verdict(task):
    def again() -> Evaluated:
        wrong = evaluated(task, "cuda", HONEST_WINDOW)
        wrong.status, wrong.error = "incorrect", "timed call 3 (fresh inputs): outside atol"
        wrong.result = {**(wrong.result or {}), "status": "incorrect"}
        return wrong

    record = finish_record(evaluated(task, "cuda", SLOWED_WINDOW, again), CleanBaselines())
    assert record.status == "incorrect" and "outside atol" in record.error and "slowed_baseline" not in record.flags


@pytest.mark.parametrize("backend", ["cuda", "cpu"])
def test_an_eager_above_the_clean_one_but_not_slowed_is_held_to_it(task, backend):
    def again() -> Evaluated:
        raise AssertionError("evaluated again")

    # Most calls slowed, the fastest as clean's: short of the slowed rule on either backend, so no second look and
    # no `slowed_baseline`; the speedup's eager is held to 10 % above the clean one all the same.
    most_calls_slowed = {"median_ms": 0.0302, "min_ms": 0.0080}
    record = finish_record(evaluated(task, backend, most_calls_slowed, again), CleanBaselines())
    assert record.status == "correct" and "slowed_baseline" not in record.flags
    assert record.eager_ms == pytest.approx(0.0079 * 1.1) and record.eager_clean_ms == pytest.approx(0.0079)
    assert record.speedup_eager == pytest.approx(0.0079 * 1.1 / 0.0078)
    assert "median in the window, 0.0302 ms a call, was more than 10% above a clean process's 0.0079 ms: the " \
        "speedup rests on 0.00869 ms" in record.timing_method  # fmt: skip
    within = finish_record(evaluated(task, backend, {"median_ms": 0.0086, "min_ms": 0.0076}, again), CleanBaselines())
    assert within.eager_ms == pytest.approx(0.0086) and "rests on" not in within.timing_method
    faster = finish_record(evaluated(task, backend, {"median_ms": 0.0060, "min_ms": 0.0058}, again), CleanBaselines())
    assert faster.eager_ms == pytest.approx(0.0060)  # held from above only: a window faster than clean keeps its own
