"""The block an evaluation child reserves before its job (poison.reserve_cuda): its size and its failures, with
the driver's answers stood in for (the allocations themselves on the GPU: test_checks_gpu.py)."""

from __future__ import annotations

import pytest
import torch

from builder import config
from builder.verify.child import poison


@pytest.fixture
def driver(monkeypatch):
    """torch.cuda's free memory and torch.empty on "cuda", stood in for: records each block asked for."""
    asked: list[int] = []
    state = {"free": 48 << 30, "oom": False}

    def mem_get_info():
        return state["free"], 80 << 30

    def empty(size, dtype=None, device=None):
        assert device == "cuda" and dtype == torch.uint8
        if state["oom"]:
            raise torch.OutOfMemoryError("CUDA out of memory")
        asked.append(size)
        return object()

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    monkeypatch.setattr(torch, "empty", empty)
    return asked, state


def test_the_block_is_the_size_asked_within_a_share_of_the_free_memory(driver):
    asked, state = driver
    assert poison.reserve_cuda(2 << 30) == 2 << 30
    state["free"] = 24 << 30  # a crowded device: at most its share
    expected = int((24 << 30) * config.EVAL_DEVICE_RESERVE_FREE_FRACTION)
    assert expected < 2 << 30
    assert poison.reserve_cuda(2 << 30) == expected
    assert asked == [2 << 30, expected]


def test_no_block_when_none_is_asked_for_too_little_is_free_or_the_device_is_full(driver):
    asked, state = driver
    assert poison.reserve_cuda(0) == 0
    state["free"] = 1 << 20  # its share is under a mebibyte
    assert poison.reserve_cuda(2 << 30) == 0
    state.update(free=48 << 30, oom=True)
    assert poison.reserve_cuda(2 << 30) == 0  # the job goes on without it
    assert asked == []
