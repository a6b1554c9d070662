"""Batched matrix multiplication C[b] = A[b] @ B[b] (torch.bmm)."""

import torch
import torch.nn as nn

OP_CATEGORY = "matmul"
DTYPE = "float32"
TOLERANCE = {"atol": 5e-3, "rtol": 1e-3}  # fp32 accumulation order over K=1024 terms
CPU_SIZE = {"batch_size": 4, "M": 64, "K": 128, "N": 96}

batch_size = 64
M = 512
K = 1024
N = 384


def module_fn(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return torch.bmm(A, B)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B, fn=module_fn):
        return fn(A, B)


def get_inputs():
    return [torch.randn(batch_size, M, K), torch.randn(batch_size, K, N)]


def get_init_inputs():
    return []
