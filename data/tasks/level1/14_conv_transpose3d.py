"""Transposed 3-D convolution (3x3x3, stride 2, padding 1, output_padding 1): doubles every spatial dim."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "convolution"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # cuDNN algorithms differ in rounding
CPU_SIZE = {"batch_size": 1, "depth": 4, "height": 8, "width": 8}

batch_size = 16
in_channels = 32
out_channels = 16
depth = 16
height = 32
width = 32


def module_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.conv_transpose3d(x, weight, bias, stride=2, padding=1, output_padding=1)


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        conv = nn.ConvTranspose3d(in_channels, out_channels, 3, stride=2, padding=1, output_padding=1)
        self.weight = nn.Parameter(conv.weight.detach().clone())
        self.bias = nn.Parameter(conv.bias.detach().clone())

    def forward(self, x, fn=module_fn):
        return fn(x, self.weight, self.bias)


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
