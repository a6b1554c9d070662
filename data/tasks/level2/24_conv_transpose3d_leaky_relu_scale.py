"""Transposed Conv3d (3x3x3, stride 2, padding 1, output_padding 1) -> LeakyReLU(0.2) -> per-channel scale."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "conv_epilogue"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # cuDNN algorithms differ in rounding
CPU_SIZE = {"batch_size": 1, "depth": 4, "height": 8, "width": 8}

batch_size = 16
in_channels = 32
out_channels = 16
depth = 16
height = 32
width = 32


def module_fn(
    x: torch.Tensor, conv_weight: torch.Tensor, conv_bias: torch.Tensor, channel_scale: torch.Tensor
) -> torch.Tensor:
    y = F.conv_transpose3d(x, conv_weight, conv_bias, stride=2, padding=1, output_padding=1)
    return F.leaky_relu(y, negative_slope=0.2) * channel_scale.view(1, -1, 1, 1, 1)


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        conv = nn.ConvTranspose3d(in_channels, out_channels, 3, stride=2, padding=1, output_padding=1)
        self.conv_weight = nn.Parameter(conv.weight.detach().clone())
        self.conv_bias = nn.Parameter(conv.bias.detach().clone())
        self.channel_scale = nn.Parameter(1.0 + 0.5 * torch.randn(out_channels))

    def forward(self, x, fn=module_fn):
        return fn(x, self.conv_weight, self.conv_bias, self.channel_scale)


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
