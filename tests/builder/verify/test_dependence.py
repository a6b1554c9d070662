"""The bytes of each perturbation target that the reference's output depends on (CPU): whole tensors where every
element reaches the output, only the rows an embedding looks up or the columns a slice keeps, both sides of a ReLU's
gate, and whole targets where the gradient cannot reach the output."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from builder.verify.child.dependence import dependent_bytes
from builder.verify.child.reference import perturbation_targets


def measured(model: nn.Module, inputs: list) -> dict:
    targets = perturbation_targets(model.eval(), inputs)
    return {
        f"{kind} {key}": n
        for (kind, key), n in zip(targets, dependent_bytes(model, inputs, targets, (1e-5, 1e-5)), strict=True)
    }


class Lambda(nn.Module):
    def __init__(self, fn, **state):
        super().__init__()
        self.fn = fn
        for name, value in state.items():
            setattr(self, name, nn.Parameter(value))

    def forward(self, *inputs):
        return self.fn(self, *inputs)


def test_an_elementwise_op_depends_on_every_element():
    model = Lambda(lambda m, x: x * m.weight + m.bias, weight=torch.randn(16), bias=torch.randn(16))
    assert measured(model, [torch.randn(8, 16)]) == {
        "input 0": 8 * 16 * 4,
        "parameter weight": 64,
        "parameter bias": 64,
    }


def test_an_embedding_depends_on_the_rows_it_looks_up():
    class Lookup(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Embedding(1000, 16)

        def forward(self, ids):
            return self.table(ids)

    ids = torch.tensor([3, 3, 7, 999])
    assert measured(Lookup(), [ids]) == {"parameter table.weight": 3 * 16 * 4}  # three distinct rows of 1000


def test_a_slice_depends_on_the_columns_it_keeps():
    model = Lambda(lambda m, x: x[:, :4] * 2.0)
    assert measured(model, [torch.randn(8, 64)]) == {"input 0": 8 * 4 * 4}


def test_a_relu_depends_on_both_sides_of_its_gate_and_a_softmax_on_every_logit():
    assert measured(Lambda(lambda m, x: torch.relu(x)), [torch.randn(32, 32)]) == {"input 0": 32 * 32 * 4}
    assert measured(Lambda(lambda m, x: torch.softmax(x, dim=-1)), [torch.randn(4, 32)]) == {"input 0": 4 * 32 * 4}


def test_batch_norm_statistics_count_whole_when_autograd_cannot_reach_them():
    class Norm(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(8)

        def forward(self, x):
            return F.relu(self.bn(x))

    counts = measured(Norm(), [torch.randn(4, 8)])
    assert counts["input 0"] == 4 * 8 * 4 and counts["parameter bn.weight"] == 32
    assert counts["parameter bn.running_mean"] == counts["parameter bn.running_var"] == 32


def test_an_output_the_gradient_cannot_reach_counts_its_targets_whole():
    assert measured(Lambda(lambda m, x: x.argmax(dim=1)), [torch.randn(8, 64)]) == {"input 0": 8 * 64 * 4}


def test_a_max_and_a_clamp_count_what_they_compare():
    assert measured(Lambda(lambda m, x: x.max(dim=1).values), [torch.randn(8, 64)]) == {"input 0": 8 * 64 * 4}
    assert measured(Lambda(lambda m, x: F.hardtanh(x * 3.0)), [torch.randn(8, 64)]) == {"input 0": 8 * 64 * 4}
    assert measured(Lambda(lambda m, x: F.max_pool2d(x, 2)), [torch.randn(1, 2, 8, 8)]) == {"input 0": 2 * 64 * 4}


def test_a_causal_mask_leaves_the_masked_scores_out():
    def masked(m, q):
        scores = q @ q.transpose(-1, -2)
        mask = torch.ones(8, 8, dtype=torch.bool).triu(1)
        return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ m.values

    counts = measured(Lambda(masked, values=torch.randn(8, 4)), [torch.randn(8, 4)])
    assert counts == {"input 0": 8 * 4 * 4, "parameter values": 8 * 4 * 4}
