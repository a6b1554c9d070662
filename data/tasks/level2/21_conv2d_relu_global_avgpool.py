"""Conv2d (3x3, padding 1) -> ReLU -> global average pooling over height and width: output (N, C).

Each sample's input gets its own random scale in [0.5, 2.5]: with i.i.d. unit-variance inputs the
mean over 16384 positions would be nearly the same for every sample, so a kernel computing one
sample and broadcasting it could pass.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "conv_epilogue"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # convolution rounding, then means over 16384 positions
CPU_SIZE = {"batch_size": 4, "height": 32, "width": 32}

batch_size = 32
in_channels = 32
out_channels = 128
height = 128
width = 128


def module_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    y = torch.relu(F.conv2d(x, weight, bias, stride=1, padding=1))
    return y.mean(dim=(2, 3))


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.weight = nn.Parameter(conv.weight.detach().clone())
        self.bias = nn.Parameter(conv.bias.detach().clone())

    def forward(self, x, fn=module_fn):
        return fn(x, self.weight, self.bias)


def get_inputs():
    scale = 0.5 + 2.0 * torch.rand(batch_size, 1, 1, 1)
    return [torch.randn(batch_size, in_channels, height, width) * scale]


def get_init_inputs():
    return [in_channels, out_channels]
