"""Linear layer (classifier head) followed by softmax over its 256 outputs.

The weight is drawn with std 2/sqrt(in_features) so logits have std ~2: with nn.Linear's default
scale the probabilities would all sit near 1/256 and vary little.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "gemm_epilogue"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}  # logits from 4096-term dot products in another order
CPU_SIZE = {"batch_size": 256, "in_features": 512}

batch_size = 32768
in_features = 4096
out_features = 256


def module_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.softmax(F.linear(x, weight, bias), dim=1)


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * (2.0 / in_features**0.5))
        self.bias = nn.Parameter(0.1 * torch.randn(out_features))

    def forward(self, x, fn=module_fn):
        return fn(x, self.weight, self.bias)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
