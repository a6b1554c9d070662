"""One LSTM cell step (as nn.LSTMCell): returns the new hidden and cell states side by side.

gates = x W_ih^T + b_ih + h W_hh^T + b_hh, split in (input, forget, cell, output) order;
c' = sigmoid(f) * c + sigmoid(i) * tanh(g);  h' = sigmoid(o) * tanh(c').  Output: cat([h', c'], 1).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "recurrent"
DTYPE = "float32"
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # two GEMMs with K=1024 summed, then saturating activations
CPU_SIZE = {"batch_size": 64, "input_size": 128, "hidden_size": 128}

batch_size = 4096
input_size = 1024
hidden_size = 1024


def module_fn(
    x: torch.Tensor,
    h: torch.Tensor,
    c: torch.Tensor,
    weight_ih: torch.Tensor,
    weight_hh: torch.Tensor,
    bias_ih: torch.Tensor,
    bias_hh: torch.Tensor,
) -> torch.Tensor:
    gates = F.linear(x, weight_ih, bias_ih) + F.linear(h, weight_hh, bias_hh)
    in_gate, forget_gate, cell_gate, out_gate = gates.chunk(4, dim=1)
    c_next = torch.sigmoid(forget_gate) * c + torch.sigmoid(in_gate) * torch.tanh(cell_gate)
    h_next = torch.sigmoid(out_gate) * torch.tanh(c_next)
    return torch.cat([h_next, c_next], dim=1)


class Model(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        cell = nn.LSTMCell(input_size, hidden_size)
        self.weight_ih = nn.Parameter(cell.weight_ih.detach().clone())
        self.weight_hh = nn.Parameter(cell.weight_hh.detach().clone())
        self.bias_ih = nn.Parameter(cell.bias_ih.detach().clone())
        self.bias_hh = nn.Parameter(cell.bias_hh.detach().clone())

    def forward(self, x, h, c, fn=module_fn):
        return fn(x, h, c, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)


def get_inputs():
    return [
        torch.randn(batch_size, input_size),
        torch.randn(batch_size, hidden_size),
        torch.randn(batch_size, hidden_size),
    ]


def get_init_inputs():
    return [input_size, hidden_size]
