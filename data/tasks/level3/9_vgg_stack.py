"""VGG-style feature stack: two stages of (conv3x3-ReLU, conv3x3-ReLU, 2x2 max pool), 3 -> 64 -> 128 channels.

Convolution weights are Kaiming-normal (std sqrt(2 / fan_in)) so activations keep their scale
through the four ReLU layers instead of shrinking towards zero.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "cnn_block"
DTYPE = "float32"
TOLERANCE = {"atol": 2e-3, "rtol": 2e-3}  # four chained convolutions (up to 1152 terms), cuDNN rounding differs
CPU_SIZE = {"batch_size": 2, "height": 32, "width": 32}

batch_size = 16
in_channels = 3
height = 128
width = 128


def module_fn(
    x: torch.Tensor,
    conv1_weight: torch.Tensor,
    conv1_bias: torch.Tensor,
    conv2_weight: torch.Tensor,
    conv2_bias: torch.Tensor,
    conv3_weight: torch.Tensor,
    conv3_bias: torch.Tensor,
    conv4_weight: torch.Tensor,
    conv4_bias: torch.Tensor,
) -> torch.Tensor:
    x = torch.relu(F.conv2d(x, conv1_weight, conv1_bias, padding=1))
    x = torch.relu(F.conv2d(x, conv2_weight, conv2_bias, padding=1))
    x = F.max_pool2d(x, kernel_size=2, stride=2)
    x = torch.relu(F.conv2d(x, conv3_weight, conv3_bias, padding=1))
    x = torch.relu(F.conv2d(x, conv4_weight, conv4_bias, padding=1))
    return F.max_pool2d(x, kernel_size=2, stride=2)


class Model(nn.Module):
    def __init__(self, in_channels):
        super().__init__()
        channels = [(in_channels, 64), (64, 64), (64, 128), (128, 128)]
        for index, (cin, cout) in enumerate(channels, start=1):
            weight = torch.randn(cout, cin, 3, 3) * (2.0 / (cin * 9)) ** 0.5
            setattr(self, f"conv{index}_weight", nn.Parameter(weight))
            setattr(self, f"conv{index}_bias", nn.Parameter(0.1 * torch.randn(cout)))

    def forward(self, x, fn=module_fn):
        return fn(
            x,
            self.conv1_weight,
            self.conv1_bias,
            self.conv2_weight,
            self.conv2_bias,
            self.conv3_weight,
            self.conv3_bias,
            self.conv4_weight,
            self.conv4_bias,
        )


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels]
