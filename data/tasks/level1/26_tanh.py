"""Hyperbolic tangent."""

import torch
import torch.nn as nn

OP_CATEGORY = "activation"
DTYPE = "float32"
CPU_SIZE = {"batch_size": 32, "dim": 2048}

batch_size = 4096
dim = 16384


def module_fn(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, fn=module_fn):
        return fn(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
