"""Linear layer followed by log-sum-exp over the output features (one value per row).

The weight is drawn with std 2/sqrt(in_features) (logits std ~2): with nn.Linear's default scale
the log-sum-exp of 4096 logits is ~log(4096) + 0.17 on every row, within tolerance of a constant.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "gemm_epilogue"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-4}  # logits from 4096-term dot products; log-sum-exp itself is stable
CPU_SIZE = {"batch_size": 64, "in_features": 512, "out_features": 512}

batch_size = 1024
in_features = 4096
out_features = 4096


def module_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(F.linear(x, weight, bias), dim=1)


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
