"""The stream-order probe on CUDA, in-process on trusted fakes (run on the GPU box): device work on another stream
that is not ordered within the call is side_stream however short it is (a new non-blocking stream, a pool stream
never joined, the per-thread default stream); work joined to the calling stream, and work on the legacy default
stream (launches without a stream), is not."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from builder.tasks import instantiate, load_task_module
from builder.tasks.suite import describe_task_file
from builder.verify.child import checks, stream_order
from tests.builder.verify import in_process

pytestmark = pytest.mark.gpu

TASKS = Path(__file__).resolve().parents[2] / "fixtures" / "tasks" / "level1"
JOB = {"backend": "cuda", "seeds": [123_456_789, 987_654_321], "trials": 2, "atol": 1e-4, "rtol": 1e-4}
PER_THREAD = 0x2  # cudaStreamPerThread


@pytest.fixture(scope="module")
def scale_shift():
    return load_task_module(describe_task_file(TASKS / "1_scale_shift.py"))


def on(stream_of, wait: bool = False, join: bool = False, spin: int = 0):
    """A forward computing the right answer on the stream `stream_of()` gives, waiting for the caller's stream
    first and making the caller's stream wait for it afterwards as asked."""

    def forward(x, weight, bias):
        caller, side = torch.cuda.current_stream(), stream_of()
        out = torch.empty_like(x)
        if wait:
            side.wait_stream(caller)
        with torch.cuda.stream(side):
            if spin:
                torch.cuda._sleep(spin)
            torch.addcmul(bias, x, weight, out=out)
        if join:
            caller.wait_stream(side)
        return out

    return forward


ESCAPING = {
    "short on a new non-blocking stream": on(lambda: torch.cuda.Stream()),
    "long on a new non-blocking stream": on(lambda: torch.cuda.Stream(), spin=5_000_000),
    "short on a pool stream, never joined": on(lambda: torch.cuda.Stream(), wait=True),
    "short on the per-thread default stream": on(lambda: torch.cuda.ExternalStream(PER_THREAD)),
}
ORDERED = {
    "on the calling stream": on(torch.cuda.current_stream),
    "on a pool stream, joined": on(lambda: torch.cuda.Stream(), wait=True, join=True),
    "on the legacy default stream": on(torch.cuda.default_stream),
}


def bound_for(forward, module, seed=7):
    model, inputs = instantiate(module, seed, "cuda")
    return checks.FunctionalBinding(forward).bind(model, module, seed, "cuda"), inputs


@pytest.mark.parametrize("name", sorted(ESCAPING))
def test_work_not_ordered_within_the_call_is_found_whatever_its_duration(name, scale_shift):
    bound, inputs = bound_for(ESCAPING[name], scale_shift)
    reason = stream_order.unordered_reason(bound, inputs)
    assert reason and "not ordered within the call" in reason, name
    result = in_process.evaluate(ESCAPING[name], scale_shift, JOB)
    assert "side_stream" in result["flags"] and result["status"] == "incorrect", result


def test_the_per_thread_stream_is_found_on_a_non_default_caller_only(scale_shift):
    bound, inputs = bound_for(ESCAPING["short on the per-thread default stream"], scale_shift)
    assert stream_order.unordered_reason(bound, inputs).startswith("called on a non-default stream")


@pytest.mark.parametrize("name", sorted(ORDERED))
def test_work_ordered_within_the_call_is_not_a_fault(name, scale_shift):
    bound, inputs = bound_for(ORDERED[name], scale_shift)
    assert stream_order.unordered_reason(bound, inputs) is None, name
    result = in_process.evaluate(ORDERED[name], scale_shift, JOB)
    assert "side_stream" not in result["flags"] and result["status"] == "correct", result


def test_the_probe_knows_its_streams():
    ids = [stream_order.stream_id(s) for s in (torch.cuda.default_stream(), *map(stream_order.blocking_stream, (0, 1)))]
    assert None not in ids and len(set(ids)) == 3, ids
