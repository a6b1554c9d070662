"""Per-sample mean squared error between predictions and targets (reduction over features only).

The batch is not averaged: a mean over millions of terms concentrates to within rtol of a constant,
which a kernel could return without reading its inputs.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "loss"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}  # means over 1024 terms in another order
CPU_SIZE = {"batch_size": 256}

batch_size = 65536
dim = 1024


def module_fn(predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(predictions, targets, reduction="none").mean(dim=1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets, fn=module_fn):
        return fn(predictions, targets)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
