"""Conv1d (kernel 5, padding 2, with bias) -> exact GELU, on long sequences."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "conv_epilogue"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # 320-term dot products; cuDNN algorithms differ in rounding
CPU_SIZE = {"batch_size": 2, "length": 1024}

batch_size = 32
in_channels = 64
out_channels = 64
length = 16384


def module_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.gelu(F.conv1d(x, weight, bias, stride=1, padding=2), approximate="none")


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        conv = nn.Conv1d(in_channels, out_channels, 5, padding=2)
        self.weight = nn.Parameter(conv.weight.detach().clone())
        self.bias = nn.Parameter(conv.bias.detach().clone())

    def forward(self, x, fn=module_fn):
        return fn(x, self.weight, self.bias)


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels]
