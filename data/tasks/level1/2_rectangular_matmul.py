"""Rectangular matrix multiplication C = A @ B with A (M, K) and B (K, N)."""

import torch
import torch.nn as nn

OP_CATEGORY = "matmul"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-2, "rtol": 1e-3}  # fp32 accumulation order over K=4096 terms
CPU_SIZE = {"M": 128, "K": 512, "N": 192}

M = 2048
K = 4096
N = 1536


def module_fn(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return torch.matmul(A, B)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B, fn=module_fn):
        return fn(A, B)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
