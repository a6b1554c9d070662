"""Matrix multiplication with a transposed right operand: C = A @ B.T, B stored (N, K)."""

import torch
import torch.nn as nn

OP_CATEGORY = "matmul"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-2, "rtol": 1e-3}  # fp32 accumulation order over K=4096 terms
CPU_SIZE = {"M": 192, "K": 512, "N": 128}

M = 2048
K = 4096
N = 2048


def module_fn(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return torch.matmul(A, B.T)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B, fn=module_fn):
        return fn(A, B)


def get_inputs():
    return [torch.randn(M, K), torch.randn(N, K)]


def get_init_inputs():
    return []
