"""Three-layer MLP: Linear -> ReLU -> Linear -> ReLU -> Linear."""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "mlp"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # three chained GEMMs with K up to 4096, accumulation order differs
CPU_SIZE = {"batch_size": 64, "in_features": 256, "hidden_features": 512, "out_features": 128}

batch_size = 2048
in_features = 2048
hidden_features = 4096
out_features = 1024


def module_fn(
    x: torch.Tensor,
    fc1_weight: torch.Tensor,
    fc1_bias: torch.Tensor,
    fc2_weight: torch.Tensor,
    fc2_bias: torch.Tensor,
    fc3_weight: torch.Tensor,
    fc3_bias: torch.Tensor,
) -> torch.Tensor:
    x = torch.relu(F.linear(x, fc1_weight, fc1_bias))
    x = torch.relu(F.linear(x, fc2_weight, fc2_bias))
    return F.linear(x, fc3_weight, fc3_bias)


class Model(nn.Module):
    def __init__(self, in_features, hidden_features, out_features):
        super().__init__()
        sizes = [(in_features, hidden_features), (hidden_features, hidden_features), (hidden_features, out_features)]
        for index, (fan_in, fan_out) in enumerate(sizes, start=1):
            # Kaiming-normal weights keep activations at unit scale through the ReLUs, so the output is
            # not shrunk towards zero layer after layer as with nn.Linear's default init.
            weight = torch.randn(fan_out, fan_in) * (2.0 / fan_in) ** 0.5
            setattr(self, f"fc{index}_weight", nn.Parameter(weight))
            setattr(self, f"fc{index}_bias", nn.Parameter(0.1 * torch.randn(fan_out)))

    def forward(self, x, fn=module_fn):
        return fn(x, self.fc1_weight, self.fc1_bias, self.fc2_weight, self.fc2_bias, self.fc3_weight, self.fc3_bias)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden_features, out_features]
