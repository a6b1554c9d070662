"""Softplus log(1 + exp(x)) with beta 1 and the linear regime above threshold 20; inputs span both regimes."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "activation"
DTYPE = "float32"
CPU_SIZE = {"batch_size": 32, "dim": 2048}

batch_size = 4096
dim = 16384


def module_fn(x: torch.Tensor) -> torch.Tensor:
    return F.softplus(x, beta=1.0, threshold=20.0)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, fn=module_fn):
        return fn(x)


def get_inputs():
    return [torch.randn(batch_size, dim) * 8.0]


def get_init_inputs():
    return []
