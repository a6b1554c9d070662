"""The degeneracy checks themselves: they must pass healthy outputs and name each weakness."""

from __future__ import annotations

import pytest
import torch

from .output_checks import constant_slice_fraction, degeneracy_problems

ATOL, RTOL = 1e-4, 1e-4


@pytest.fixture()
def generator():
    return torch.Generator().manual_seed(0)


def test_healthy_outputs_pass(generator):
    x = torch.randn(64, 128, generator=generator)
    assert degeneracy_problems(x, ATOL, RTOL) == []
    assert degeneracy_problems(torch.relu(x), ATOL, RTOL) == []  # half zeros is fine
    assert degeneracy_problems(torch.tensor(2.5), ATOL, RTOL) == []


def test_near_uniform_softmax_is_flagged(generator):
    probabilities = torch.softmax(torch.randn(8, 16384, generator=generator), dim=1)
    problems = degeneracy_problems(probabilities, ATOL, RTOL)
    assert any("output std" in p for p in problems)
    assert any("differ from zero" in p for p in problems)


def test_constant_and_broadcast_outputs_are_flagged(generator):
    assert any("output std" in p for p in degeneracy_problems(torch.full((32, 32), 3.0), ATOL, RTOL))
    row = torch.randn(1, 256, generator=generator)
    broadcast = row.expand(64, 256)  # the same row for every sample
    assert constant_slice_fraction(broadcast, 0, ATOL, RTOL) == 1.0
    assert constant_slice_fraction(broadcast, 1, ATOL, RTOL) == 0.0
    assert any("along dim 0" in p for p in degeneracy_problems(broadcast, ATOL, RTOL))


def test_output_close_to_its_median_is_flagged(generator):
    concentrated = 2.0 + 1e-5 * torch.randn(4096, generator=generator)
    problems = degeneracy_problems(concentrated, 1e-4, 1e-3)
    assert any("differ from the median" in p for p in problems)


def test_non_finite_and_zero_scalar_outputs_are_flagged():
    assert degeneracy_problems(torch.tensor([1.0, float("nan"), 2.0]), ATOL, RTOL) == [
        "output has NaN or infinite values"
    ]
    assert degeneracy_problems(torch.tensor(1e-6), ATOL, RTOL) == ["scalar output 1e-06 is ~0"]
