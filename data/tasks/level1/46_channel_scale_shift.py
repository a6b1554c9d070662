"""Per-channel affine transform x * scale[c] + shift[c] on an NCHW tensor (broadcasting elementwise)."""

import torch
import torch.nn as nn

OP_CATEGORY = "elementwise"
DTYPE = "float32"
CPU_SIZE = {"batch_size": 2, "height": 32, "width": 32}

batch_size = 32
channels = 128
height = 128
width = 128


def module_fn(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    return x * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1)


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(channels))
        self.shift = nn.Parameter(torch.randn(channels))

    def forward(self, x, fn=module_fn):
        return fn(x, self.scale, self.shift)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
