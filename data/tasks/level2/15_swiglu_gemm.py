"""SwiGLU feed-forward gate: silu(x @ W_gate^T) * (x @ W_up^T), two GEMMs sharing one input."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "gemm_epilogue"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # fp32 accumulation order over K=4096 terms, then a product
CPU_SIZE = {"batch_size": 64, "in_features": 512, "hidden_features": 256}

batch_size = 1024
in_features = 4096
hidden_features = 2048


def module_fn(x: torch.Tensor, gate_weight: torch.Tensor, up_weight: torch.Tensor) -> torch.Tensor:
    return F.silu(F.linear(x, gate_weight)) * F.linear(x, up_weight)


class Model(nn.Module):
    def __init__(self, in_features, hidden_features):
        super().__init__()
        self.gate_weight = nn.Parameter(nn.Linear(in_features, hidden_features, bias=False).weight.detach().clone())
        self.up_weight = nn.Parameter(nn.Linear(in_features, hidden_features, bias=False).weight.detach().clone())

    def forward(self, x, fn=module_fn):
        return fn(x, self.gate_weight, self.up_weight)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden_features]
