"""Inclusive prefix product along the last dimension (torch.cumprod).

Factors are 1 + 0.02 * N(0, 1), so the log of the running product is a random walk with step
~0.02: after 2048 steps it stays within a few units of 0, far from fp32 under- or overflow, while
the products still vary by orders of magnitude across the row.
"""

import torch
import torch.nn as nn

OP_CATEGORY = "cumulative"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}  # products of up to 2048 factors accumulate relative rounding
CPU_SIZE = {"batch_size": 64}

batch_size = 32768
dim = 2048


def module_fn(x: torch.Tensor) -> torch.Tensor:
    return torch.cumprod(x, dim=-1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, fn=module_fn):
        return fn(x)


def get_inputs():
    return [1.0 + 0.02 * torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
