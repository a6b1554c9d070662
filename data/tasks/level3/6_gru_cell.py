"""One GRU cell step (as nn.GRUCell): returns the new hidden state.

r = sigmoid(W_ir x + b_ir + W_hr h + b_hr);  z = sigmoid(W_iz x + b_iz + W_hz h + b_hz);
n = tanh(W_in x + b_in + r * (W_hn h + b_hn));  h' = (1 - z) * n + z * h.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "recurrent"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # two GEMMs with K=1024, then saturating activations
CPU_SIZE = {"batch_size": 64, "input_size": 128, "hidden_size": 128}

batch_size = 4096
input_size = 1024
hidden_size = 1024


def module_fn(
    x: torch.Tensor,
    h: torch.Tensor,
    weight_ih: torch.Tensor,
    weight_hh: torch.Tensor,
    bias_ih: torch.Tensor,
    bias_hh: torch.Tensor,
) -> torch.Tensor:
    x_r, x_z, x_n = F.linear(x, weight_ih, bias_ih).chunk(3, dim=1)
    h_r, h_z, h_n = F.linear(h, weight_hh, bias_hh).chunk(3, dim=1)
    reset = torch.sigmoid(x_r + h_r)
    update = torch.sigmoid(x_z + h_z)
    candidate = torch.tanh(x_n + reset * h_n)
    return (1.0 - update) * candidate + update * h


class Model(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        cell = nn.GRUCell(input_size, hidden_size)
        self.weight_ih = nn.Parameter(cell.weight_ih.detach().clone())
        self.weight_hh = nn.Parameter(cell.weight_hh.detach().clone())
        self.bias_ih = nn.Parameter(cell.bias_ih.detach().clone())
        self.bias_hh = nn.Parameter(cell.bias_hh.detach().clone())

    def forward(self, x, h, fn=module_fn):
        return fn(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)


def get_inputs():
    return [torch.randn(batch_size, input_size), torch.randn(batch_size, hidden_size)]


def get_init_inputs():
    return [input_size, hidden_size]
