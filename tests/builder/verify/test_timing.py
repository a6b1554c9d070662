"""timing.measure (clean baselines) and a candidate's refereed window in-process on trusted fakes: warm-up
excluded, inputs in the same buffers, fresh inputs for every timed call, the budget honoured."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from builder import config
from builder.tasks import load_task_module
from builder.tasks.suite import describe_task_file
from builder.verify.child import timing
from builder.verify.child.checks import FunctionalBinding
from builder.verify.protocol import plan
from tests.builder.verify.refereed import run_window, time_candidate

TASK = Path(__file__).resolve().parents[2] / "fixtures" / "tasks" / "level1" / "1_scale_shift.py"
JOB = {"seeds": [31_415, 27_182], "atol": 1e-4, "rtol": 1e-4, "timed_calls": 6, "warmup_calls": 2}


@pytest.fixture(scope="module")
def module():
    return load_task_module(describe_task_file(TASK))


def honest(x, weight, bias):
    return torch.from_numpy(x.numpy() * weight.numpy() + bias.numpy())


def test_a_window_counts_only_timed_calls_and_draws_fresh_inputs_for_each(module):
    seen_first_values = []

    def recording(x, weight, bias):
        seen_first_values.append(float(x[0, 0]))
        return honest(x, weight, bias)

    result = time_candidate(FunctionalBinding(recording), module, JOB, "cpu")
    runtime = result["runtime"]
    # six calls, or more where the accounting of so short a window would flag it (it runs on; referee.py)
    assert 6 <= runtime["n"] <= config.TIMING_BLOCKS and not result["verdict"].flags
    assert runtime["min_ms"] <= runtime["median_ms"] <= runtime["max_ms"]
    assert runtime["std_ms"] >= 0 and runtime["mean_ms"] > 0
    before, in_window = 2, JOB["warmup_calls"]  # one call per input set before the window; the job's in it
    assert len(seen_first_values) == before + in_window + runtime["n"]  # warm-up calls ran but are not in n
    assert len(set(seen_first_values[: before + in_window])) == 2  # warm-up rotates the two input sets...
    assert len(set(seen_first_values[before + in_window :])) == 6  # ...every timed call has inputs of its own
    assert f"{before} warm-up calls before the window (device shared) and {in_window} in it" in result["timing_method"]
    assert "6 timed calls" in result["timing_method"] and "fresh inputs" in result["timing_method"]


def test_each_sets_first_output_comes_before_the_window_and_the_warm_up_inside_it(module):
    """Set-up, each set's first call and the outputs the judge needs are made while the device is shared (with
    yield points between steps); the window warms up again, untimed, before its timed pairs."""
    calls, yields = [], []

    def recording(x, weight, bias):
        calls.append(1)
        return honest(x, weight, bias)

    job = dict(JOB, warmup_calls=5)
    prepared = timing.prepare_timing(FunctionalBinding(recording), module, job, "cpu",
                                     between_steps=lambda: yields.append(len(calls)))  # fmt: skip
    # Before each of the four sets is made (two seeds, the candidate's and eager's), then between the two pairs.
    assert len(calls) == 2 and yields == [0, 0, 0, 0, 1]
    assert set(prepared.first_outputs()) == {"timing0", "timing1"}
    timed = run_window(prepared, job, "cpu")
    assert len(calls) == 2 + 5 + timed["runtime"]["n"]


def test_inputs_arrive_in_the_same_buffers(module):
    addresses = set()

    def recording(x, weight, bias):
        addresses.add(x.data_ptr())
        return honest(x, weight, bias)

    time_candidate(FunctionalBinding(recording), module, JOB, "cpu")
    assert len(addresses) == 1  # so an address-keyed cache sees changed contents, not new tensors


def test_result_cache_fails_while_timing(module):
    cache = {}

    def caches_by_address(x, weight, bias):
        key = x.data_ptr()
        if key not in cache:
            cache[key] = honest(x, weight, bias)
        return cache[key].clone()

    result = time_candidate(FunctionalBinding(caches_by_address), module, JOB, "cpu")
    # No reference runs in the candidate's process: set 2's first output (set 1's, reused) goes to the judge,
    # which compares it with the clean reference of set 2.
    assert judge_timing_outputs(module, result) == "input set 2"


def judge_timing_outputs(module, timed: dict) -> str | None:
    from builder.verify.child.reference import compute_reference
    from builder.verify.judge import outputs as judge
    from builder.verify.protocol import tensor_files

    job = dict(JOB, backend="cpu", trials=1)
    reference = tensor_files.unpack(*tensor_files.pack(compute_reference(module, job).outputs))
    outputs = tensor_files.unpack(*tensor_files.pack(timed["first_outputs"]))
    error = judge.judge_timing(outputs, reference, 2, JOB["atol"], JOB["rtol"])
    return error and ("input set 2" if "timed input set 2" in error and "reused across calls" in error else error)


def test_an_honest_candidates_timed_outputs_pass_the_judge(module):
    timed = time_candidate(FunctionalBinding(honest), module, JOB, "cpu")
    assert set(timed["first_outputs"]) == {"timing0", "timing1"}
    assert judge_timing_outputs(module, timed) is None


def clean_references(module, samples):
    """The clean reference child's outputs for JOB with these timed samples, as the parent reads them."""
    from builder.verify.child.reference import compute_reference
    from builder.verify.protocol import tensor_files

    job = dict(JOB, backend="cpu", trials=1, timed_samples=samples)
    return tensor_files.unpack(*tensor_files.pack(compute_reference(module, job).outputs))


def test_a_wrong_output_in_a_sampled_timed_call_is_judged_in_the_parent(module):
    calls = {"n": 0}

    def wrong_once_timed(x, weight, bias):  # right for the checks' sets and the warm-up, wrong on fresh inputs
        calls["n"] += 1
        out = honest(x, weight, bias)
        return out if calls["n"] <= 4 else out + 1.0

    samples = [[1, 1, 1234567], [4, 0, 7654321]]
    result = time_candidate(FunctionalBinding(wrong_once_timed), module, JOB, "cpu", samples=samples,
                            reference=clean_references(module, samples))  # fmt: skip
    assert "timed call 2 (fresh inputs)" in result["verdict"].error
    honest_result = time_candidate(FunctionalBinding(honest), module, JOB, "cpu", samples=samples,
                                   reference=clean_references(module, samples))  # fmt: skip
    assert honest_result["verdict"].error is None and sorted(honest_result["report"].revealed) == [1, 4]


def test_a_stale_output_in_the_warm_up_ends_the_window(module):
    calls = {"n": 0}

    def stale_after_three(x, weight, bias):
        calls["n"] += 1
        out = honest(x, weight, bias)
        return out if calls["n"] <= 3 else out + 1.0

    result = time_candidate(FunctionalBinding(stale_after_three), module, JOB, "cpu")
    assert "runtime" not in result and "reused across calls" in result["verdict"].error


def test_eager_is_timed_in_half_blocks_alternating_with_the_candidates(module, monkeypatch):
    monkeypatch.setattr(timing.config, "TIMING_STABLE_SPREAD", -1.0)  # every block, however steady
    order = []

    def recording(x, weight, bias):
        order.append("candidate")
        return honest(x, weight, bias)

    real_forward = module.Model.forward

    def eager_forward(self, x, fn=module.module_fn):
        if fn is module.module_fn:
            order.append("eager")
        return real_forward(self, x, fn)

    module.Model.forward = eager_forward
    try:
        result = time_candidate(FunctionalBinding(recording), module, dict(JOB, timed_calls=20), "cpu")
    finally:
        module.Model.forward = real_forward
    timed = order[(2 + JOB["warmup_calls"]) * 2 :]  # after the warm-up calls of both
    assert result["runtime"]["n"] == 20 and result["eager_window"]["n"] == 20
    assert len(result["speedup_blocks"]) == 10 and all(r > 0 for r in result["speedup_blocks"])
    halves = [timed[i : i + 2] for i in range(0, len(timed), 2)]  # blocks of two calls a side
    assert len(halves) == 20 and all(len(set(half)) == 1 for half in halves)  # one side a half-block
    assert [h[0] for h in halves[:4]] == ["candidate", "eager", "eager", "candidate"]  # the first side alternates
    assert "half-blocks alternating with the candidate's" in result["timing_method"]


def sleeping_sets(module, seconds):
    """Input sets whose call sleeps `seconds()` and returns the honest answer."""

    def call(x, weight, bias):
        time.sleep(seconds())
        return honest(x, weight, bias)

    return timing.build_input_sets(module, [1, 2], "cpu", lambda model, seed: FunctionalBinding(call).bind(
        model, module, seed, "cpu").call)  # fmt: skip


def window_of(module, candidate_seconds, eager_seconds, warmup_calls=1, timed_calls=100):
    """A refereed window whose candidate and eager sleep as told (both on the honest answer)."""
    candidate = timing.CallTimer(sleeping_sets(module, candidate_seconds), "cpu", 1e-4, 1e-4, task_module=module)
    eager = timing.CallTimer(sleeping_sets(module, eager_seconds), "cpu", 1e-4, 1e-4, task_module=module)
    sets = timing.TimingSets(candidate, eager, timing.warm_up(candidate, eager, 0))
    job = dict(JOB, warmup_calls=warmup_calls, timed_calls=timed_calls, timing_budget_s=60)
    return run_window(sets, job, "cpu")


def test_a_steady_window_stops_after_the_minimum_blocks(module, monkeypatch):
    monkeypatch.setattr(timing.config, "TIMING_STABLE_SPREAD", 0.05)
    monkeypatch.setattr(timing.config, "TIMING_BLOCK_MS", 1e6)  # blocks of ten pairs, however slow the calls
    result = window_of(module, lambda: 0.01, lambda: 0.02)
    blocks = len(result["speedup_blocks"])
    # Usually the minimum; a loaded machine's sleep jitter can take a block or two more, never all of them.
    assert timing.config.MIN_TIMING_BLOCKS <= blocks < timing.config.TIMING_BLOCKS
    assert result["runtime"]["n"] == 10 * blocks
    assert "stopped once" in result["timing_method"]
    assert result["eager_window"]["median_ms"] / result["runtime"]["median_ms"] == pytest.approx(2.0, rel=0.2)


def test_an_unsteady_window_runs_every_block(module, monkeypatch):
    monkeypatch.setattr(timing.config, "TIMING_STABLE_SPREAD", 0.05)
    monkeypatch.setattr(timing.config, "TIMING_BLOCK_MS", 1e6)
    calls = {"n": 0}

    def erratic() -> float:  # blocks of 10 calls alternate between 5 ms and 20 ms
        calls["n"] += 1
        return 0.005 if (calls["n"] // 10) % 3 else 0.02

    result = window_of(module, erratic, lambda: 0.01)
    assert len(result["speedup_blocks"]) == timing.config.TIMING_BLOCKS
    assert "stopped once" not in result["timing_method"]


def test_a_steady_baseline_stops_after_the_minimum_blocks(module, monkeypatch):
    monkeypatch.setattr(timing.config, "TIMING_STABLE_SPREAD", 0.05)
    monkeypatch.setattr(timing.config, "TIMING_BLOCK_MS", 1e6)
    result = timing.measure(sleeping_sets(module, lambda: 0.01), "cpu", atol=1e-4, rtol=1e-4, warmup_calls=1,
                            timed_calls=100, budget_s=60)  # fmt: skip
    # Usually the minimum; a loaded machine's sleep jitter can take a block or two more, never all of them.
    assert 10 * timing.config.MIN_TIMING_BLOCKS <= result["runtime"]["n"] < 100
    assert "stopped once" in result["timing_method"]
    monkeypatch.setattr(timing.config, "TIMING_STABLE_SPREAD", -1.0)
    result = timing.measure(sleeping_sets(module, lambda: 0.001), "cpu", atol=1e-4, rtol=1e-4, warmup_calls=1,
                            timed_calls=100, budget_s=60)  # fmt: skip
    assert result["runtime"]["n"] == 100 and "stopped once" not in result["timing_method"]


def test_a_slow_kernels_window_holds_fewer_calls(module, monkeypatch):
    """Calls that fill a block alone give blocks of one pair; the window's warm-up ends once it has run
    WINDOW_WARMUP_MS, and the window once MIN_TIMED_MS of candidate calls and MIN_TIMING_BLOCKS blocks are in."""
    monkeypatch.setattr(timing.config, "TIMING_STABLE_SPREAD", 10.0)  # settled at the first chance: count the rule
    monkeypatch.setattr(timing.config, "TIMING_BLOCK_MS", 20.0)
    monkeypatch.setattr(timing.config, "WINDOW_WARMUP_MS", 50.0)
    monkeypatch.setattr(timing.config, "MIN_TIMED_MS", 200.0)
    result = window_of(module, lambda: 0.03, lambda: 0.005, warmup_calls=10)
    n = result["runtime"]["n"]
    assert "blocks of 1 calls a side" in result["timing_method"] and len(result["speedup_blocks"]) == n
    assert "and 2 in it" in result["timing_method"]  # 35 ms a pair: the second reaches 50 ms
    # 30 ms a call: the 7th brings 200 ms (a loaded machine's longer sleeps, an earlier one), not the 20 calls
    total = result["runtime"]["mean_ms"] * n
    assert timing.config.MIN_TIMING_BLOCKS <= n <= 7 and total >= 200
    assert n == timing.config.MIN_TIMING_BLOCKS or total - result["runtime"]["max_ms"] < 200  # stopped once it was in


def test_a_fast_kernels_window_keeps_its_calls(module, monkeypatch):
    """Calls far shorter than a block: ten pairs a block, every warm-up pair, MIN_TIMED_CALLS at least."""
    monkeypatch.setattr(timing.config, "TIMING_STABLE_SPREAD", 10.0)
    monkeypatch.setattr(timing.config, "TIMING_BLOCK_MS", 20.0)
    result = window_of(module, lambda: 0.0, lambda: 0.0, warmup_calls=10)
    assert "blocks of 10 calls a side" in result["timing_method"] and "and 10 in it" in result["timing_method"]
    assert result["runtime"]["n"] == 10 * timing.config.MIN_TIMING_BLOCKS


def test_calls_per_block_fill_the_block_time():
    assert plan.calls_per_block(0.1, 10) == 10 and plan.calls_per_block(5.0, 10) == 4
    assert plan.calls_per_block(70.0, 10) == 1 and plan.calls_per_block(0.0, 10) == 10


def test_budget_stops_after_the_minimum(module):
    def slow(x, weight, bias):
        time.sleep(0.02)
        return honest(x, weight, bias)

    sets = timing.build_input_sets(module, [1, 2], "cpu", lambda model, seed: FunctionalBinding(slow).bind(
        model, module, seed, "cpu").call)  # fmt: skip
    result = timing.measure(sets, "cpu", atol=1e-4, rtol=1e-4, warmup_calls=1, timed_calls=500, budget_s=0.1,
                            min_calls=3)  # fmt: skip
    assert 3 <= result["runtime"]["n"] < 500


def test_a_candidate_raising_while_timed_is_a_runtime_error(module):
    calls = {"n": 0}

    def fails_later(x, weight, bias):
        calls["n"] += 1
        if calls["n"] > 6:
            raise RuntimeError("out of resources")
        return honest(x, weight, bias)

    result = time_candidate(FunctionalBinding(fails_later), module, JOB, "cpu")
    assert "out of resources" in result["verdict"].runtime_error


@pytest.mark.gpu
def test_cuda_timing_leaves_the_hosts_launch_out(module):
    """The host's time before its launch (here a 0.3 ms sleep) is hidden behind the device's spin: the interval
    is the stream's work. Work left on another stream is the side-stream checks' (test_checks_gpu.py)."""
    task = load_task_module(describe_task_file(TASK))

    def slow_host(x, weight, bias):
        time.sleep(0.0003)
        return torch.addcmul(bias, x, weight)

    result = time_candidate(FunctionalBinding(slow_host), task, JOB, "cuda")
    assert not result["verdict"].flags
    print(f"slow-host candidate timed at {result['runtime']['median_ms']:.4f} ms")
    assert result["runtime"]["median_ms"] < 0.2


@pytest.mark.gpu
def test_cuda_timing_holds_host_work_that_reads_the_inputs(module):
    """Host work cannot hide behind the spin when it needs the device's data: the copy to the host waits for
    the spin, so the host's computation (here a 5 ms sleep besides it) falls inside the interval."""
    task = load_task_module(describe_task_file(TASK))

    def on_the_host(x, weight, bias):
        host = torch.addcmul(bias.cpu(), x.cpu(), weight.cpu())
        time.sleep(0.005)
        return host.to(x.device)

    result = time_candidate(FunctionalBinding(on_the_host), task, JOB, "cuda")
    assert not result["verdict"].flags
    print(f"host-computing candidate timed at {result['runtime']['median_ms']:.3f} ms")
    assert result["runtime"]["median_ms"] > 5.0
