"""Squeeze-and-excitation block: channel gates sigmoid(W2 relu(W1 mean_hw(x))) rescale x.

Inputs carry a per-sample, per-channel offset: with i.i.d. unit-variance inputs the spatial means
are ~0 everywhere, the gates would be nearly identical across samples, and a kernel reusing one
sample's gates for all could pass.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "cnn_block"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # means over 3136 positions and two small GEMMs in another order
CPU_SIZE = {"batch_size": 4, "height": 14, "width": 14}

batch_size = 64
channels = 256
reduction = 16
height = 56
width = 56


def module_fn(
    x: torch.Tensor, fc1_weight: torch.Tensor, fc1_bias: torch.Tensor, fc2_weight: torch.Tensor, fc2_bias: torch.Tensor
) -> torch.Tensor:
    squeezed = x.mean(dim=(2, 3))
    gates = torch.sigmoid(F.linear(torch.relu(F.linear(squeezed, fc1_weight, fc1_bias)), fc2_weight, fc2_bias))
    return x * gates[:, :, None, None]


class Model(nn.Module):
    def __init__(self, channels, reduction):
        super().__init__()
        fc1 = nn.Linear(channels, channels // reduction)
        fc2 = nn.Linear(channels // reduction, channels)
        self.fc1_weight = nn.Parameter(fc1.weight.detach().clone() * 4.0)
        self.fc1_bias = nn.Parameter(fc1.bias.detach().clone())
        self.fc2_weight = nn.Parameter(fc2.weight.detach().clone() * 4.0)
        self.fc2_bias = nn.Parameter(fc2.bias.detach().clone())

    def forward(self, x, fn=module_fn):
        return fn(x, self.fc1_weight, self.fc1_bias, self.fc2_weight, self.fc2_bias)


def get_inputs():
    offsets = torch.randn(batch_size, channels, 1, 1)
    return [torch.randn(batch_size, channels, height, width) + offsets]


def get_init_inputs():
    return [channels, reduction]
