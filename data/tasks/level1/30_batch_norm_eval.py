"""Batch normalization in inference mode: (x - running_mean) / sqrt(running_var + eps) * weight + bias.

Eval mode keeps the op deterministic and pure (no running-stat updates). The running statistics are
seeded, non-trivial buffers (not the 0/1 defaults) passed to module_fn like the parameters, so a
kernel receives everything it needs and one that ignores them is caught.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "normalization"
DTYPE = "float32"
CPU_SIZE = {"batch_size": 2, "height": 32, "width": 32}

batch_size = 32
channels = 128
height = 128
width = 128


def module_fn(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor
) -> torch.Tensor:
    return F.batch_norm(x, running_mean, running_var, weight, bias, training=False, eps=1e-5)


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.2 * torch.randn(channels))
        self.bias = nn.Parameter(0.2 * torch.randn(channels))
        self.register_buffer("running_mean", 0.5 * torch.randn(channels))
        self.register_buffer("running_var", 0.5 + torch.rand(channels))

    def forward(self, x, fn=module_fn):
        return fn(x, self.weight, self.bias, self.running_mean, self.running_var)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
