"""builder.tasks.loading.instantiate: made on the target device, with one deterministic way back to the CPU."""

from __future__ import annotations

import types

import pytest
import torch

from builder.tasks import instantiate


class _Scale(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n))

    def forward(self, x):
        return x * self.weight


def task_module(get_inputs) -> types.ModuleType:
    module = types.ModuleType("ka_test_task")
    module.Model, module.get_init_inputs, module.get_inputs = _Scale, lambda: [4], get_inputs
    return module


def test_a_task_that_needs_host_tensors_is_built_on_the_cpu_and_moved():
    def needs_host():
        return [torch.from_numpy(torch.randn(4).numpy())]  # .numpy() fails on any other device

    model, inputs = instantiate(task_module(needs_host), 7, "meta")
    assert inputs[0].is_meta and model.weight.is_meta
    with pytest.raises(Exception):  # noqa: B017 - what the direct build raised, whatever its type
        with torch.device("meta"):
            needs_host()


def test_inputs_are_drawn_on_the_device_and_the_same_under_a_seed():
    module = task_module(lambda: [torch.randn(4)])
    (_, first), (_, again), (_, other) = (instantiate(module, s, "cpu") for s in (7, 7, 8))
    assert torch.equal(first[0], again[0]) and not torch.equal(first[0], other[0])
    _, on_meta = instantiate(module, 7, "meta")
    assert on_meta[0].is_meta


def test_running_out_of_device_memory_is_not_a_reason_to_fall_back():
    def out_of_memory():
        if torch.get_default_device().type == "meta":
            raise torch.OutOfMemoryError("no room")
        return [torch.randn(4)]

    with pytest.raises(torch.OutOfMemoryError):
        instantiate(task_module(out_of_memory), 7, "meta")
