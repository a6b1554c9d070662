"""Elementwise multiply-add a * b + c over three large matrices: purely memory-bound."""

import torch
import torch.nn as nn

OP_CATEGORY = "elementwise"
DTYPE = "float32"
CPU_SIZE = {"batch_size": 32, "dim": 2048}

batch_size = 4096
dim = 8192


def module_fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return a * b + c


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b, c, fn=module_fn):
        return fn(a, b, c)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
