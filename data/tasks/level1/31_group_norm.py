"""Group normalization (16 groups over 128 channels) with a perturbed affine transform."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "normalization"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # statistics over 131072 elements per group in another order
CPU_SIZE = {"batch_size": 2, "height": 16, "width": 16}

batch_size = 16
channels = 128
num_groups = 16
height = 128
width = 128


def module_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.group_norm(x, 16, weight, bias, eps=1e-5)


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels))
        self.bias = nn.Parameter(0.1 * torch.randn(channels))

    def forward(self, x, fn=module_fn):
        return fn(x, self.weight, self.bias)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
