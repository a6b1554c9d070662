"""Transposed Conv2d (4x4, stride 2, padding 1, no bias) -> per-channel bias subtraction -> tanh."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "conv_epilogue"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # cuDNN algorithms differ in rounding
CPU_SIZE = {"batch_size": 2, "height": 16, "width": 16}

batch_size = 16
in_channels = 64
out_channels = 32
height = 128
width = 128


def module_fn(x: torch.Tensor, conv_weight: torch.Tensor, channel_bias: torch.Tensor) -> torch.Tensor:
    y = F.conv_transpose2d(x, conv_weight, None, stride=2, padding=1)
    return torch.tanh(y - channel_bias.view(1, -1, 1, 1))


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        conv = nn.ConvTranspose2d(in_channels, out_channels, 4, stride=2, padding=1, bias=False)
        self.conv_weight = nn.Parameter(conv.weight.detach().clone())
        self.channel_bias = nn.Parameter(0.5 * torch.randn(out_channels))

    def forward(self, x, fn=module_fn):
        return fn(x, self.conv_weight, self.channel_bias)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
