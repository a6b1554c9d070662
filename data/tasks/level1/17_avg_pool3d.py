"""3-D average pooling (kernel 3, stride 2, padding 1, zero padding counted in the average)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "pooling"
DTYPE = "float32"
CPU_SIZE = {"batch_size": 1, "depth": 8, "height": 16, "width": 16}

batch_size = 16
channels = 32
depth = 32
height = 64
width = 64


def module_fn(x: torch.Tensor) -> torch.Tensor:
    return F.avg_pool3d(x, kernel_size=3, stride=2, padding=1, count_include_pad=True)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, fn=module_fn):
        return fn(x)


def get_inputs():
    return [torch.randn(batch_size, channels, depth, height, width)]


def get_init_inputs():
    return []
