"""Log-softmax over the last dimension of a (batch, dim) matrix (numerically stable form)."""

import torch
import torch.nn as nn

OP_CATEGORY = "softmax"
DTYPE = "float32"
CPU_SIZE = {"batch_size": 128}

batch_size = 16384
dim = 4096


def module_fn(x: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(x, dim=-1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, fn=module_fn):
        return fn(x)


def get_inputs():
    return [torch.randn(batch_size, dim) * 2.0]


def get_init_inputs():
    return []
