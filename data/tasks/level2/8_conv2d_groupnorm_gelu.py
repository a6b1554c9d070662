"""Conv2d (3x3, padding 1) -> GroupNorm (8 groups) -> exact GELU."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "conv_epilogue"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # convolution rounding, then statistics over 131072 elements per group
CPU_SIZE = {"batch_size": 2, "height": 32, "width": 32}

batch_size = 16
in_channels = 32
out_channels = 64
num_groups = 8
height = 128
width = 128


def module_fn(
    x: torch.Tensor, conv_weight: torch.Tensor, conv_bias: torch.Tensor, gn_weight: torch.Tensor, gn_bias: torch.Tensor
) -> torch.Tensor:
    y = F.conv2d(x, conv_weight, conv_bias, stride=1, padding=1)
    y = F.group_norm(y, 8, gn_weight, gn_bias, eps=1e-5)
    return F.gelu(y, approximate="none")


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.conv_weight = nn.Parameter(conv.weight.detach().clone())
        self.conv_bias = nn.Parameter(conv.bias.detach().clone())
        self.gn_weight = nn.Parameter(1.0 + 0.1 * torch.randn(out_channels))
        self.gn_bias = nn.Parameter(0.1 * torch.randn(out_channels))

    def forward(self, x, fn=module_fn):
        return fn(x, self.conv_weight, self.conv_bias, self.gn_weight, self.gn_bias)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
