"""2-D convolution with an asymmetric 3x5 kernel, stride (2, 1), padding (1, 2), no bias."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "convolution"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # 480-term dot products; cuDNN algorithms differ in rounding
CPU_SIZE = {"batch_size": 2, "height": 32, "width": 48}

batch_size = 16
in_channels = 32
out_channels = 64
height = 256
width = 256


def module_fn(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.conv2d(x, weight, None, stride=(2, 1), padding=(1, 2))


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        conv = nn.Conv2d(in_channels, out_channels, (3, 5), stride=(2, 1), padding=(1, 2), bias=False)
        self.weight = nn.Parameter(conv.weight.detach().clone())

    def forward(self, x, fn=module_fn):
        return fn(x, self.weight)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
