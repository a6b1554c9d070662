"""3-D convolution (nn.Conv3d, 3x3x3, stride 1, padding 1, with bias)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "convolution"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # 432-term dot products; cuDNN algorithms differ in rounding
CPU_SIZE = {"batch_size": 1, "depth": 8, "height": 16, "width": 16}

batch_size = 8
in_channels = 16
out_channels = 32
depth = 32
height = 64
width = 64


def module_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.conv3d(x, weight, bias, stride=1, padding=1)


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        conv = nn.Conv3d(in_channels, out_channels, 3, padding=1)
        self.weight = nn.Parameter(conv.weight.detach().clone())
        self.bias = nn.Parameter(conv.bias.detach().clone())

    def forward(self, x, fn=module_fn):
        return fn(x, self.weight, self.bias)


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
