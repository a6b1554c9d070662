"""Checks that a task's reference output is worth verifying against.

A reference output that is constant, near zero, or constant along an axis lets a lazy or wrong
kernel pass the tolerance comparison; these helpers list such problems (empty list = fine). They
read their thresholds from builder.config and judge closeness with the task's own tolerance.
"""

from __future__ import annotations

import torch

from builder import config


def _within_tolerance(values: torch.Tensor, target: torch.Tensor, atol: float, rtol: float) -> torch.Tensor:
    return (values - target).abs() <= atol + rtol * target.abs()


def constant_slice_fraction(output: torch.Tensor, dim: int, atol: float, rtol: float) -> float:
    """Share of slices along `dim` whose elements all lie within tolerance of the slice mean."""
    values = output.double().movedim(dim, -1).reshape(-1, output.shape[dim])
    means = values.mean(dim=1, keepdim=True).expand_as(values)
    constant = _within_tolerance(means, values, atol, rtol).all(dim=1)
    return constant.double().mean().item()


def degeneracy_problems(output: torch.Tensor, atol: float, rtol: float) -> list[str]:
    """Reasons why `output` would make a weak reference under tolerances (atol, rtol)."""
    values = output.detach().double()
    if not torch.isfinite(values).all():
        return ["output has NaN or infinite values"]
    if values.numel() == 1:
        magnitude = values.abs().item()
        if magnitude < config.TASK_MIN_SCALAR_MAGNITUDE:
            return [f"scalar output {magnitude:.3g} is ~0"]
        return []
    problems = []
    std = values.std().item()
    if std < config.TASK_MIN_OUTPUT_STD:
        problems.append(f"output std {std:.3g} < {config.TASK_MIN_OUTPUT_STD}")
    for dim, length in enumerate(values.shape):
        if length < 2:
            continue
        fraction = constant_slice_fraction(values, dim, atol, rtol)
        if fraction > config.TASK_MAX_CONSTANT_SLICE_FRACTION:
            problems.append(f"{fraction:.0%} of the slices along dim {dim} are constant within tolerance")
    median = values.flatten().median()
    for name, guess in (("zero", torch.zeros_like(values)), ("the median", torch.full_like(values, median.item()))):
        distinguishable = (~_within_tolerance(guess, values, atol, rtol)).double().mean().item()
        if distinguishable < config.TASK_MIN_DISTINGUISHABLE_FRACTION:
            problems.append(f"only {distinguishable:.0%} of the elements differ from {name} beyond tolerance")
    return problems
