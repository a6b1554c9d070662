"""Conv2d (3x3, padding 1, no bias) -> BatchNorm2d in inference mode -> ReLU (a classic CNN layer).

Eval mode keeps the op pure; the running statistics are seeded, non-trivial buffers passed to
module_fn like the parameters, so a kernel may fold them into the convolution or apply them after.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "conv_epilogue"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # 288-term dot products; cuDNN algorithms differ in rounding
CPU_SIZE = {"batch_size": 2, "height": 32, "width": 32}

batch_size = 16
in_channels = 32
out_channels = 64
height = 128
width = 128


def module_fn(
    x: torch.Tensor,
    conv_weight: torch.Tensor,
    bn_weight: torch.Tensor,
    bn_bias: torch.Tensor,
    bn_running_mean: torch.Tensor,
    bn_running_var: torch.Tensor,
) -> torch.Tensor:
    y = F.conv2d(x, conv_weight, None, stride=1, padding=1)
    y = F.batch_norm(y, bn_running_mean, bn_running_var, bn_weight, bn_bias, training=False, eps=1e-5)
    return torch.relu(y)


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        conv = nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False)
        self.conv_weight = nn.Parameter(conv.weight.detach().clone())
        self.bn_weight = nn.Parameter(1.0 + 0.2 * torch.randn(out_channels))
        self.bn_bias = nn.Parameter(0.2 * torch.randn(out_channels))
        self.register_buffer("bn_running_mean", 0.1 * torch.randn(out_channels))
        self.register_buffer("bn_running_var", 0.2 + 0.3 * torch.rand(out_channels))

    def forward(self, x, fn=module_fn):
        return fn(x, self.conv_weight, self.bn_weight, self.bn_bias, self.bn_running_mean, self.bn_running_var)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
