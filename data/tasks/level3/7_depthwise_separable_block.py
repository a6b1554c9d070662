"""MobileNet-style depthwise-separable block (inference): depthwise 3x3-BN-ReLU, pointwise 1x1-BN-ReLU.

BatchNorms are in eval mode with seeded, non-trivial running statistics passed as arguments.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "cnn_block"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # depthwise then 128-term pointwise convolution, cuDNN rounding differs
CPU_SIZE = {"batch_size": 2, "height": 16, "width": 16}

batch_size = 32
in_channels = 128
out_channels = 256
height = 56
width = 56


def _bn(x, weight, bias, mean, var):
    return F.batch_norm(x, mean, var, weight, bias, training=False, eps=1e-5)


def module_fn(
    x: torch.Tensor,
    depthwise_weight: torch.Tensor,
    bn1_weight: torch.Tensor,
    bn1_bias: torch.Tensor,
    pointwise_weight: torch.Tensor,
    bn2_weight: torch.Tensor,
    bn2_bias: torch.Tensor,
    bn1_running_mean: torch.Tensor,
    bn1_running_var: torch.Tensor,
    bn2_running_mean: torch.Tensor,
    bn2_running_var: torch.Tensor,
) -> torch.Tensor:
    y = F.conv2d(x, depthwise_weight, None, stride=1, padding=1, groups=x.shape[1])
    y = torch.relu(_bn(y, bn1_weight, bn1_bias, bn1_running_mean, bn1_running_var))
    y = F.conv2d(y, pointwise_weight, None)
    return torch.relu(_bn(y, bn2_weight, bn2_bias, bn2_running_mean, bn2_running_var))


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        depthwise = nn.Conv2d(in_channels, in_channels, 3, padding=1, groups=in_channels, bias=False)
        pointwise = nn.Conv2d(in_channels, out_channels, 1, bias=False)
        self.depthwise_weight = nn.Parameter(depthwise.weight.detach().clone())
        self.bn1_weight = nn.Parameter(1.0 + 0.2 * torch.randn(in_channels))
        self.bn1_bias = nn.Parameter(0.2 * torch.randn(in_channels))
        self.pointwise_weight = nn.Parameter(pointwise.weight.detach().clone())
        self.bn2_weight = nn.Parameter(1.0 + 0.2 * torch.randn(out_channels))
        self.bn2_bias = nn.Parameter(0.2 * torch.randn(out_channels))
        self.register_buffer("bn1_running_mean", 0.1 * torch.randn(in_channels))
        self.register_buffer("bn1_running_var", 0.2 + 0.3 * torch.rand(in_channels))
        self.register_buffer("bn2_running_mean", 0.1 * torch.randn(out_channels))
        self.register_buffer("bn2_running_var", 0.05 + 0.1 * torch.rand(out_channels))

    def forward(self, x, fn=module_fn):
        return fn(
            x,
            self.depthwise_weight,
            self.bn1_weight,
            self.bn1_bias,
            self.pointwise_weight,
            self.bn2_weight,
            self.bn2_bias,
            self.bn1_running_mean,
            self.bn1_running_var,
            self.bn2_running_mean,
            self.bn2_running_var,
        )


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
