"""Depthwise 3x3 convolution followed by a pointwise 1x1 convolution (no norm, no activation)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "convolution"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # two convolutions in sequence, cuDNN rounding differs
CPU_SIZE = {"batch_size": 2, "height": 32, "width": 32}

batch_size = 16
in_channels = 64
out_channels = 128
height = 128
width = 128


def module_fn(
    x: torch.Tensor,
    depthwise_weight: torch.Tensor,
    depthwise_bias: torch.Tensor,
    pointwise_weight: torch.Tensor,
    pointwise_bias: torch.Tensor,
) -> torch.Tensor:
    y = F.conv2d(x, depthwise_weight, depthwise_bias, stride=1, padding=1, groups=x.shape[1])
    return F.conv2d(y, pointwise_weight, pointwise_bias)


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        depthwise = nn.Conv2d(in_channels, in_channels, 3, padding=1, groups=in_channels)
        pointwise = nn.Conv2d(in_channels, out_channels, 1)
        self.depthwise_weight = nn.Parameter(depthwise.weight.detach().clone())
        self.depthwise_bias = nn.Parameter(depthwise.bias.detach().clone())
        self.pointwise_weight = nn.Parameter(pointwise.weight.detach().clone())
        self.pointwise_bias = nn.Parameter(pointwise.bias.detach().clone())

    def forward(self, x, fn=module_fn):
        return fn(x, self.depthwise_weight, self.depthwise_bias, self.pointwise_weight, self.pointwise_bias)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
