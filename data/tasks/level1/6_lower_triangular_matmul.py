"""Product of two lower-triangular matrices: C = tril(tril(A) @ tril(B)).

The operands are dense random matrices; only their lower triangles count, so a kernel may skip the
zero halves (row i of C needs columns 0..i only, over k in j..i).
"""

import torch
import torch.nn as nn

OP_CATEGORY = "matmul"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-2, "rtol": 1e-3}  # fp32 accumulation order over up to N=4096 terms
CPU_SIZE = {"N": 256}

N = 4096


def module_fn(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return torch.tril(torch.matmul(torch.tril(A), torch.tril(B)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B, fn=module_fn):
        return fn(A, B)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
