"""Row-wise L2 normalization x / max(||x||_2, eps) (F.normalize over the last dimension).

Rows have 512 entries, so normalized values are ~0.044 in magnitude: well above the tolerance.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "normalization"
DTYPE = "float32"
CPU_SIZE = {"batch_size": 256}

batch_size = 131072
dim = 512


def module_fn(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x, p=2.0, dim=1, eps=1e-12)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, fn=module_fn):
        return fn(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
