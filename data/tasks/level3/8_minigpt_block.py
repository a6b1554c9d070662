"""GPT-2-style decoder block: causal multi-head self-attention and a tanh-GELU MLP, both pre-norm.

x = x + Proj(CausalAttention(LN1(x)));  x = x + FcProj(GELU_tanh(Fc(LN2(x)))).
12 heads of 64; position j attends to positions <= j. Q/K/V weights have std sqrt(2 / embed_dim) so
attention scores have std ~2 rather than near-uniform attention.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

OP_CATEGORY = "transformer"
DTYPE = "float32"
TOLERANCE = {"atol": 2e-3, "rtol": 2e-3}  # chained GEMMs (K up to 3072), softmax and two LayerNorms
CPU_SIZE = {"batch_size": 2, "seq_len": 32, "embed_dim": 192}

batch_size = 8
seq_len = 512
embed_dim = 768


def module_fn(
    x: torch.Tensor,
    ln1_weight: torch.Tensor,
    ln1_bias: torch.Tensor,
    attn_weight: torch.Tensor,
    attn_bias: torch.Tensor,
    attn_proj_weight: torch.Tensor,
    attn_proj_bias: torch.Tensor,
    ln2_weight: torch.Tensor,
    ln2_bias: torch.Tensor,
    fc_weight: torch.Tensor,
    fc_bias: torch.Tensor,
    fc_proj_weight: torch.Tensor,
    fc_proj_bias: torch.Tensor,
) -> torch.Tensor:
    batch, seq, embed = x.shape
    heads = 12
    h = F.layer_norm(x, (embed,), ln1_weight, ln1_bias, eps=1e-5)
    q, k, v = F.linear(h, attn_weight, attn_bias).chunk(3, dim=-1)
    q, k, v = (t.reshape(batch, seq, heads, embed // heads).transpose(1, 2) for t in (q, k, v))
    scores = torch.matmul(q, k.transpose(-2, -1)) / ((embed // heads) ** 0.5)
    future = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))
    context = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(batch, seq, embed)
    x = x + F.linear(context, attn_proj_weight, attn_proj_bias)
    h = F.layer_norm(x, (embed,), ln2_weight, ln2_bias, eps=1e-5)
    h = F.gelu(F.linear(h, fc_weight, fc_bias), approximate="tanh")
    return x + F.linear(h, fc_proj_weight, fc_proj_bias)


class Model(nn.Module):
    def __init__(self, embed_dim):
        super().__init__()
        self.ln1_weight = nn.Parameter(1.0 + 0.1 * torch.randn(embed_dim))
        self.ln1_bias = nn.Parameter(0.1 * torch.randn(embed_dim))
        self.attn_weight = nn.Parameter(torch.randn(3 * embed_dim, embed_dim) * (2.0 / embed_dim) ** 0.5)
        self.attn_bias = nn.Parameter(0.1 * torch.randn(3 * embed_dim))
        self.attn_proj_weight = nn.Parameter(torch.randn(embed_dim, embed_dim) / embed_dim**0.5)
        self.attn_proj_bias = nn.Parameter(0.1 * torch.randn(embed_dim))
        self.ln2_weight = nn.Parameter(1.0 + 0.1 * torch.randn(embed_dim))
        self.ln2_bias = nn.Parameter(0.1 * torch.randn(embed_dim))
        self.fc_weight = nn.Parameter(torch.randn(4 * embed_dim, embed_dim) / embed_dim**0.5)
        self.fc_bias = nn.Parameter(0.1 * torch.randn(4 * embed_dim))
        self.fc_proj_weight = nn.Parameter(torch.randn(embed_dim, 4 * embed_dim) / (4 * embed_dim) ** 0.5)
        self.fc_proj_bias = nn.Parameter(0.1 * torch.randn(embed_dim))

    def forward(self, x, fn=module_fn):
        return fn(
            x,
            self.ln1_weight,
            self.ln1_bias,
            self.attn_weight,
            self.attn_bias,
            self.attn_proj_weight,
            self.attn_proj_bias,
            self.ln2_weight,
            self.ln2_bias,
            self.fc_weight,
            self.fc_bias,
            self.fc_proj_weight,
            self.fc_proj_bias,
        )


def get_inputs():
    return [torch.randn(batch_size, seq_len, embed_dim)]


def get_init_inputs():
    return [embed_dim]
