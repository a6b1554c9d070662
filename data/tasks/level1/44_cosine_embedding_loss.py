"""Per-pair cosine embedding loss with +1/-1 labels and margin 0.5 (reduction="none").

Label +1 pairs cost 1 - cos, label -1 pairs max(0, cos - margin). The second embedding is the first
plus independent noise (cosine ~0.7), so both branches produce varied, clearly non-zero losses.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "loss"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}  # dot products and norms over 256 terms in another order
CPU_SIZE = {"batch_size": 1024}

batch_size = 262144
dim = 256


def module_fn(x1: torch.Tensor, x2: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cosine_embedding_loss(x1, x2, labels, margin=0.5, reduction="none")


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x1, x2, labels, fn=module_fn):
        return fn(x1, x2, labels)


def get_inputs():
    x1 = torch.randn(batch_size, dim)
    x2 = x1 + torch.randn(batch_size, dim)
    labels = torch.randint(0, 2, (batch_size,)).float() * 2.0 - 1.0
    return [x1, x2, labels]


def get_init_inputs():
    return []
