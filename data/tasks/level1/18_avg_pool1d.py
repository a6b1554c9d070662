"""1-D average pooling (kernel 4, stride 4): non-overlapping windows."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "pooling"
DTYPE = "float32"
CPU_SIZE = {"batch_size": 4, "length": 4096}

batch_size = 64
channels = 64
length = 16384


def module_fn(x: torch.Tensor) -> torch.Tensor:
    return F.avg_pool1d(x, kernel_size=4, stride=4)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, fn=module_fn):
        return fn(x)


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return []
