"""Post-norm residual: LayerNorm(x + residual) over the hidden dimension with a perturbed affine."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "normalization"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # mean/variance over 1024 terms in another order
CPU_SIZE = {"batch_size": 2, "seq_len": 64}

batch_size = 64
seq_len = 1024
hidden = 1024


def module_fn(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x + residual, (x.shape[-1],), weight, bias, eps=1e-5)


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.bias = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x, residual, fn=module_fn):
        return fn(x, residual, self.weight, self.bias)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden), torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden]
