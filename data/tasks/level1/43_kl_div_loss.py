"""Per-sample KL divergence KL(target || prediction) between two distributions given as logits.

Both logit sets are turned into log-probabilities (log_softmax) and F.kl_div sums
p_target * (log p_target - log p_pred) over the classes of each row.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "loss"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}  # sums over 1024 classes in another order
CPU_SIZE = {"batch_size": 256}

batch_size = 65536
num_classes = 1024


def module_fn(prediction_logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
    log_p = torch.log_softmax(prediction_logits, dim=1)
    log_q = torch.log_softmax(target_logits, dim=1)
    return F.kl_div(log_p, log_q, reduction="none", log_target=True).sum(dim=1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, prediction_logits, target_logits, fn=module_fn):
        return fn(prediction_logits, target_logits)


def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randn(batch_size, num_classes)]


def get_init_inputs():
    return []
