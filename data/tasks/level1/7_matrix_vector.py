"""Matrix-vector product y = A @ x with A (M, K) and x (K, 1): memory-bound on A."""

import torch
import torch.nn as nn

OP_CATEGORY = "matmul"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-2, "rtol": 1e-3}  # fp32 accumulation order over K=16384 terms
CPU_SIZE = {"M": 512, "K": 2048}

M = 8192
K = 16384


def module_fn(A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.matmul(A, x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, x, fn=module_fn):
        return fn(A, x)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
