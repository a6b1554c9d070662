"""Per-sample cross-entropy of class logits against integer targets (reduction="none").

Not averaged over the batch: a batch mean concentrates close to a constant (see 40_mse_loss).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "loss"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}  # log-sum-exp over 4096 classes in another order
CPU_SIZE = {"batch_size": 256}

batch_size = 16384
num_classes = 4096


def module_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, targets, reduction="none")


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets, fn=module_fn):
        return fn(logits, targets)


def get_inputs():
    return [torch.randn(batch_size, num_classes) * 2.0, torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []
