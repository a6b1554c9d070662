"""Depthwise 2-D convolution (groups = channels, 3x3, padding 1, with bias): memory-bound."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "convolution"
DTYPE = "float32"
CPU_SIZE = {"batch_size": 2, "height": 32, "width": 32}

batch_size = 16
channels = 64
height = 256
width = 256


def module_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.conv2d(x, weight, bias, stride=1, padding=1, groups=x.shape[1])


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        conv = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)
        self.weight = nn.Parameter(conv.weight.detach().clone())
        self.bias = nn.Parameter(conv.bias.detach().clone())

    def forward(self, x, fn=module_fn):
        return fn(x, self.weight, self.bias)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
