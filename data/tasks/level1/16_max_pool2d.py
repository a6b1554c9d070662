"""2-D max pooling (kernel 3, stride 2, padding 1)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "pooling"
DTYPE = "float32"
CPU_SIZE = {"batch_size": 2, "height": 64, "width": 64}

batch_size = 16
channels = 64
height = 256
width = 256


def module_fn(x: torch.Tensor) -> torch.Tensor:
    return F.max_pool2d(x, kernel_size=3, stride=2, padding=1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, fn=module_fn):
        return fn(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
