"""Conv2d (3x3, padding 1) -> tanh -> multiply by a constant 2.0 -> add a per-channel bias."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "conv_epilogue"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # 288-term dot products; cuDNN algorithms differ in rounding
CPU_SIZE = {"batch_size": 2, "height": 32, "width": 32}

batch_size = 16
in_channels = 32
out_channels = 64
height = 128
width = 128


def module_fn(
    x: torch.Tensor, conv_weight: torch.Tensor, conv_bias: torch.Tensor, channel_bias: torch.Tensor
) -> torch.Tensor:
    y = torch.tanh(F.conv2d(x, conv_weight, conv_bias, stride=1, padding=1)) * 2.0
    return y + channel_bias.view(1, -1, 1, 1)


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.conv_weight = nn.Parameter(conv.weight.detach().clone())
        self.conv_bias = nn.Parameter(conv.bias.detach().clone())
        self.channel_bias = nn.Parameter(0.5 * torch.randn(out_channels))

    def forward(self, x, fn=module_fn):
        return fn(x, self.conv_weight, self.conv_bias, self.channel_bias)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
