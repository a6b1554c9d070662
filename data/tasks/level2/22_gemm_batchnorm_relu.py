"""Linear layer -> BatchNorm1d in inference mode (seeded running statistics) -> ReLU."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "gemm_epilogue"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # fp32 accumulation order over K=4096 terms
CPU_SIZE = {"batch_size": 64, "in_features": 512, "out_features": 512}

batch_size = 1024
in_features = 4096
out_features = 4096


def module_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    bn_weight: torch.Tensor,
    bn_bias: torch.Tensor,
    bn_running_mean: torch.Tensor,
    bn_running_var: torch.Tensor,
) -> torch.Tensor:
    y = F.linear(x, weight, bias)
    y = F.batch_norm(y, bn_running_mean, bn_running_var, bn_weight, bn_bias, training=False, eps=1e-5)
    return torch.relu(y)


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        linear = nn.Linear(in_features, out_features)
        self.weight = nn.Parameter(linear.weight.detach().clone())
        self.bias = nn.Parameter(linear.bias.detach().clone())
        self.bn_weight = nn.Parameter(1.0 + 0.2 * torch.randn(out_features))
        self.bn_bias = nn.Parameter(0.2 * torch.randn(out_features))
        self.register_buffer("bn_running_mean", 0.1 * torch.randn(out_features))
        self.register_buffer("bn_running_var", 0.2 + 0.3 * torch.rand(out_features))

    def forward(self, x, fn=module_fn):
        return fn(x, self.weight, self.bias, self.bn_weight, self.bn_bias, self.bn_running_mean, self.bn_running_var)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
