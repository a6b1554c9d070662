"""Linear layer (GEMM + bias) followed by ReLU."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "gemm_epilogue"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}
CPU_SIZE = {"batch_size": 64, "in_features": 512, "out_features": 512}

batch_size = 1024
in_features = 4096
out_features = 4096


def module_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.relu(F.linear(x, weight, bias))


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        linear = nn.Linear(in_features, out_features)
        self.weight = nn.Parameter(linear.weight.detach().clone())
        self.bias = nn.Parameter(linear.bias.detach().clone())

    def forward(self, x, fn=module_fn):
        return fn(x, self.weight, self.bias)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
