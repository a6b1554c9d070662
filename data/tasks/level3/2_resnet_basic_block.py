"""ResNet basic block (inference): conv3x3-BN-ReLU-conv3x3-BN, identity shortcut, ReLU.

BatchNorms are in eval mode with seeded, non-trivial running statistics passed as arguments (a
kernel may fold them into the convolutions).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "cnn_block"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # two 576-term convolutions in sequence, cuDNN rounding differs
CPU_SIZE = {"batch_size": 2, "height": 16, "width": 16}

batch_size = 16
channels = 64
height = 112
width = 112


def _bn(x, weight, bias, mean, var):
    return F.batch_norm(x, mean, var, weight, bias, training=False, eps=1e-5)


def module_fn(
    x: torch.Tensor,
    conv1_weight: torch.Tensor,
    bn1_weight: torch.Tensor,
    bn1_bias: torch.Tensor,
    conv2_weight: torch.Tensor,
    bn2_weight: torch.Tensor,
    bn2_bias: torch.Tensor,
    bn1_running_mean: torch.Tensor,
    bn1_running_var: torch.Tensor,
    bn2_running_mean: torch.Tensor,
    bn2_running_var: torch.Tensor,
) -> torch.Tensor:
    out = F.conv2d(x, conv1_weight, None, stride=1, padding=1)
    out = torch.relu(_bn(out, bn1_weight, bn1_bias, bn1_running_mean, bn1_running_var))
    out = F.conv2d(out, conv2_weight, None, stride=1, padding=1)
    out = _bn(out, bn2_weight, bn2_bias, bn2_running_mean, bn2_running_var)
    return torch.relu(out + x)


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        for index in (1, 2):
            conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
            setattr(self, f"conv{index}_weight", nn.Parameter(conv.weight.detach().clone()))
            setattr(self, f"bn{index}_weight", nn.Parameter(1.0 + 0.2 * torch.randn(channels)))
            setattr(self, f"bn{index}_bias", nn.Parameter(0.2 * torch.randn(channels)))
        for index in (1, 2):
            self.register_buffer(f"bn{index}_running_mean", 0.1 * torch.randn(channels))
            self.register_buffer(f"bn{index}_running_var", 0.2 + 0.3 * torch.rand(channels))

    def forward(self, x, fn=module_fn):
        return fn(
            x,
            self.conv1_weight,
            self.bn1_weight,
            self.bn1_bias,
            self.conv2_weight,
            self.bn2_weight,
            self.bn2_bias,
            self.bn1_running_mean,
            self.bn1_running_var,
            self.bn2_running_mean,
            self.bn2_running_var,
        )


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
