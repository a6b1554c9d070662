"""Softmax over the last dimension of a (batch, dim) matrix.

Logits are scaled by 2 so that each row has a few dominant entries: with unit-variance logits over
1024 classes every probability is ~1e-3 and the output would sit close to the tolerance.
"""

import torch
import torch.nn as nn

OP_CATEGORY = "softmax"
DTYPE = "float32"
CPU_SIZE = {"batch_size": 128}

batch_size = 65536
dim = 1024


def module_fn(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, fn=module_fn):
        return fn(x)


def get_inputs():
    return [torch.randn(batch_size, dim) * 2.0]


def get_init_inputs():
    return []
