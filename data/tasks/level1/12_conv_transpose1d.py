"""Transposed 1-D convolution (nn.ConvTranspose1d, kernel 4, stride 2, padding 1): doubles the length."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "convolution"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # cuDNN algorithms differ in rounding
CPU_SIZE = {"batch_size": 2, "length": 1024}

batch_size = 32
in_channels = 64
out_channels = 32
length = 16384


def module_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.conv_transpose1d(x, weight, bias, stride=2, padding=1)


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        conv = nn.ConvTranspose1d(in_channels, out_channels, 4, stride=2, padding=1)
        self.weight = nn.Parameter(conv.weight.detach().clone())
        self.bias = nn.Parameter(conv.bias.detach().clone())

    def forward(self, x, fn=module_fn):
        return fn(x, self.weight, self.bias)


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels]
