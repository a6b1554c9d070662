"""CUDA-only checks in-process on trusted fakes (run on the GPU box): the NaN poison reaches
torch.empty_like through the caching allocator (with and without the block a child reserves before its job),
side-stream work is caught (and a properly joined side stream is not), library kernels are classified as such."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from builder.tasks import load_task_module
from builder.tasks.suite import describe_task_file
from builder.verify.child import op_census, timing
from builder.verify.engine import work_queues
from tests.builder.verify import in_process

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[3]
TASKS = Path(__file__).resolve().parents[2] / "fixtures" / "tasks" / "level1"
JOB = {"backend": "cuda", "seeds": [123_456_789, 987_654_321], "trials": 2, "atol": 1e-4, "rtol": 1e-4}


@pytest.fixture(scope="module")
def scale_shift():
    return load_task_module(describe_task_file(TASKS / "1_scale_shift.py"))


def test_first_row_only_sees_the_poison(scale_shift):
    def first_row_only(x, weight, bias):
        out = torch.empty_like(x)
        out[0] = x[0] * weight + bias
        return out

    result = in_process.evaluate(first_row_only, scale_shift, JOB)
    assert result["status"] == "incorrect"
    assert "uninitialized_output" in result["flags"]


def test_unjoined_side_stream_is_flagged(scale_shift):
    side = torch.cuda.Stream()

    def on_side_stream(x, weight, bias):
        out = torch.empty_like(x)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(5_000_000)
            torch.addcmul(bias, x, weight, out=out)
        return out

    result = in_process.evaluate(on_side_stream, scale_shift, JOB)
    assert "side_stream" in result["flags"], result
    assert result["status"] == "incorrect"


def test_joined_side_stream_is_not_a_fault(scale_shift):
    side = torch.cuda.Stream()

    def joins_its_stream(x, weight, bias):
        out = torch.empty_like(x)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.addcmul(bias, x, weight, out=out)
        torch.cuda.current_stream().wait_stream(side)
        return out

    result = in_process.evaluate(joins_its_stream, scale_shift, JOB)
    assert "side_stream" not in result["flags"], result
    assert result["status"] == "correct"
    assert work_queues.spanned_streams(result), result["op_census"]  # its work left the calling stream


class _Bound:
    def __init__(self, call):
        self.call = call


def _spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def test_the_clock_half_sees_short_work_left_on_another_stream_and_not_the_host_s_own_work():
    """The clock half alone: 0.5 ms of work left on a stream nobody waits for is found; 0.5 ms of host work before
    a tiny kernel, a kernel still running on the calling stream when the call returns, or side work the calling
    stream waits for, is not."""
    from builder.verify.child.side_stream import side_stream_timing_reason

    side = torch.cuda.Stream()
    x = torch.ones(16, 16, device="cuda")
    cycles_per_ms = timing._spin_rate()

    def leaves_side_work(x):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(int(0.5 * cycles_per_ms))
        return x + 1

    def slow_host_then_tiny_kernel(x):
        _spin(0.5)
        return x + 1

    def long_kernel_on_the_calling_stream(x):
        torch.cuda._sleep(int(0.3 * cycles_per_ms))
        return x + 1

    def joins_its_side_work(x):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(int(0.3 * cycles_per_ms))
        torch.cuda.current_stream().wait_stream(side)
        return x + 1

    assert side_stream_timing_reason(_Bound(leaves_side_work), [x])
    assert side_stream_timing_reason(_Bound(joins_its_side_work), [x]) is None
    assert side_stream_timing_reason(_Bound(slow_host_then_tiny_kernel), [x]) is None
    assert side_stream_timing_reason(_Bound(long_kernel_on_the_calling_stream), [x]) is None
    side.synchronize()


def test_library_kernels_are_counted_as_torch_ops():
    matmul = load_task_module(describe_task_file(TASKS / "2_small_matmul.py"))
    result = in_process.evaluate(lambda a, b: torch.matmul(a, b), matmul, dict(JOB, atol=1e-3, rtol=1e-3))
    assert result["status"] == "correct"
    assert "uses_torch_ops" in result["flags"]
    assert result["kernels_seen"] and all(k["library"] for k in result["kernels_seen"]), result["kernels_seen"]
    assert not work_queues.spanned_streams(result), result["op_census"]


def test_the_census_sees_work_off_the_calling_stream_and_graph_launches():
    x = torch.randn(1 << 16, device="cuda")
    side = torch.cuda.Stream()

    def on_side() -> torch.Tensor:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = x * 2
        torch.cuda.current_stream().wait_stream(side)
        return y

    one = op_census.census(lambda: x * 2, "cuda")
    assert (one["streams"], one["other_streams"], one["graph_launches"]) == (1, 0, 0), one
    moved = op_census.census(on_side, "cuda")
    assert (moved["streams"], moved["other_streams"]) == (1, 1), moved
    both = op_census.census(lambda: (x * 3, on_side()), "cuda")
    assert (both["streams"], both["other_streams"]) == (2, 1), both
    static = torch.zeros_like(x)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # a graph's capture wants its work warmed up off the default stream
        static.copy_(x * 2)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static.copy_(x * 2)
    replayed = op_census.census(graph.replay, "cuda")
    assert replayed["graph_launches"] >= 1, replayed
    assert all(work_queues.spanned_streams({"op_census": c}) for c in (moved, both, replayed))


# A fresh process, as a child is: a trial's allocations after the reserve (or none), then the poison and the
# candidate's empty_like. Counts the blocks asked of the driver after the reserve.
RESERVE_SCRIPT = """
import json, sys, torch
from builder import config
from builder.verify.child import poison
from builder.verify.protocol.compare import holds_poison
config.POISON_BYTES = 64 << 20
torch.empty(1, device="cuda")  # the context, as a child makes it
taken = poison.reserve_cuda(int(sys.argv[1]))
def device_allocs():
    stats = torch.cuda.memory_stats()
    return stats.get("num_device_alloc", stats.get("segment.all.allocated"))
before = device_allocs()
x, weight = torch.randn(1 << 22, device="cuda"), torch.randn(4096, device="cuda")  # a 16 MiB input, a parameter
poison.poison_cuda([x.numel() * x.element_size()])
out = torch.empty_like(x)  # what a candidate that writes nothing returns
print(json.dumps({"taken": taken, "allocs": device_allocs() - before, "poisoned": bool(holds_poison(out).all())}))
"""


@pytest.mark.parametrize("reserve", [256 << 20, 0])
def test_a_reserved_block_serves_a_trials_allocations_and_the_poison_still_reaches_empty_like(reserve):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", RESERVE_SCRIPT, str(reserve)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["taken"] == reserve
    assert found["poisoned"], "empty_like after the poison must hold the poison's bytes everywhere"
    if reserve:
        assert found["allocs"] == 0, found  # the input, the parameter and the poison: split from the block
    else:
        assert found["allocs"] >= 3, found  # the input and the poison's blocks: each from the driver
