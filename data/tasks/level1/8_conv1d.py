"""1-D convolution (nn.Conv1d, kernel 7, padding 3, with bias)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "convolution"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # cuDNN may pick FFT/Winograd-style algorithms with other rounding
CPU_SIZE = {"batch_size": 2, "length": 1024}

batch_size = 32
in_channels = 32
out_channels = 64
length = 32768
kernel_size = 7


def module_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.conv1d(x, weight, bias, stride=1, padding=3)


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.weight = nn.Parameter(conv.weight.detach().clone())
        self.bias = nn.Parameter(conv.bias.detach().clone())

    def forward(self, x, fn=module_fn):
        return fn(x, self.weight, self.bias)


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
