"""Independent nn.Module formulations of the built-in tasks that wrap standard torch layers.

Each builder takes the task's model (whose parameters and buffers it copies with a strict
`load_state_dict`, so a parameter left out fails loudly) and its constructor arguments, and returns
a callable taking the task inputs. Tasks without a standard layer are listed in
NO_STANDARD_LAYER so that every task is accounted for.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn


def _loaded(module: nn.Module, model: nn.Module, names: dict[str, str]) -> nn.Module:
    """`module` with state `{module_key: model_attribute}` copied in strictly, in eval mode."""
    state = {key: getattr(model, attr).detach().clone() for key, attr in names.items()}
    extra = {k: v for k, v in module.state_dict().items() if k.endswith("num_batches_tracked")}
    module.load_state_dict({**state, **extra}, strict=True)
    return module.eval()


def _weight_bias(prefix: str = "", weight: str = "weight", bias: str | None = "bias") -> dict[str, str]:
    names = {f"{prefix}weight": weight}
    if bias is not None:
        names[f"{prefix}bias"] = bias
    return names


def _bn(prefix: str, attr_prefix: str) -> dict[str, str]:
    return {
        f"{prefix}weight": f"{attr_prefix}weight",
        f"{prefix}bias": f"{attr_prefix}bias",
        f"{prefix}running_mean": f"{attr_prefix}running_mean",
        f"{prefix}running_var": f"{attr_prefix}running_var",
    }


def _layer(factory: Callable[..., nn.Module], names: dict[str, str] | None = None):
    """A builder for a single parameterised layer created from the task's constructor arguments."""

    def build(model, init_inputs):
        return _loaded(factory(*init_inputs), model, names if names is not None else _weight_bias())

    return build


def _stateless(module: nn.Module):
    return lambda model, init_inputs: module


def _per_row_mean(loss: nn.Module):
    return lambda model, init_inputs: lambda a, b: loss(a, b).mean(dim=1)


def _kl_div(model, init_inputs):
    loss = nn.KLDivLoss(reduction="none", log_target=True)
    log_softmax = nn.LogSoftmax(dim=1)
    return lambda p, q: loss(log_softmax(p), log_softmax(q)).sum(dim=1)


def _residual_layernorm(model, init_inputs):
    norm = _loaded(nn.LayerNorm(*init_inputs), model, _weight_bias())
    return lambda x, residual: norm(x + residual)


def _resnet_basic_block(model, init_inputs):
    (channels,) = init_inputs
    conv1, conv2 = (nn.Conv2d(channels, channels, 3, padding=1, bias=False) for _ in range(2))
    body = nn.Sequential(conv1, nn.BatchNorm2d(channels), nn.ReLU(), conv2, nn.BatchNorm2d(channels))
    names = {"0.weight": "conv1_weight", "3.weight": "conv2_weight", **_bn("1.", "bn1_"), **_bn("4.", "bn2_")}
    body = _loaded(body, model, names)
    return lambda x: torch.relu(body(x) + x)


def _attention(model, init_inputs):
    embed_dim, num_heads = init_inputs
    attention = nn.MultiheadAttention(embed_dim, num_heads, dropout=0.0, batch_first=True)
    names = {
        "in_proj_weight": "in_proj_weight",
        "in_proj_bias": "in_proj_bias",
        "out_proj.weight": "out_proj_weight",
        "out_proj.bias": "out_proj_bias",
    }
    attention = _loaded(attention, model, names)
    return lambda x: attention(x, x, x, need_weights=False)[0]


def _transformer_block(model, init_inputs):
    embed_dim, num_heads, ffn_dim = init_inputs
    layer = nn.TransformerEncoderLayer(
        embed_dim, num_heads, ffn_dim, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
    )
    names = {
        "self_attn.in_proj_weight": "in_proj_weight",
        "self_attn.in_proj_bias": "in_proj_bias",
        "self_attn.out_proj.weight": "out_proj_weight",
        "self_attn.out_proj.bias": "out_proj_bias",
    }
    for layer_name in ("linear1", "linear2", "norm1", "norm2"):
        names.update(_weight_bias(f"{layer_name}.", f"{layer_name}_weight", f"{layer_name}_bias"))
    return _loaded(layer, model, names)


def _minigpt_block(model, init_inputs):
    (embed_dim,) = init_inputs
    ln1, ln2 = nn.LayerNorm(embed_dim), nn.LayerNorm(embed_dim)
    attention = nn.MultiheadAttention(embed_dim, 12, dropout=0.0, batch_first=True)
    mlp = nn.Sequential(
        nn.Linear(embed_dim, 4 * embed_dim), nn.GELU(approximate="tanh"), nn.Linear(4 * embed_dim, embed_dim)
    )
    blocks = nn.ModuleDict({"ln1": ln1, "attention": attention, "ln2": ln2, "mlp": mlp})
    names = {
        **_weight_bias("ln1.", "ln1_weight", "ln1_bias"),
        **_weight_bias("ln2.", "ln2_weight", "ln2_bias"),
        "attention.in_proj_weight": "attn_weight",
        "attention.in_proj_bias": "attn_bias",
        **_weight_bias("attention.out_proj.", "attn_proj_weight", "attn_proj_bias"),
        **_weight_bias("mlp.0.", "fc_weight", "fc_bias"),
        **_weight_bias("mlp.2.", "fc_proj_weight", "fc_proj_bias"),
    }
    _loaded(blocks, model, names)

    def run(x):
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        h = ln1(x)
        x = x + attention(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + mlp(ln2(x))

    return run


def _lstm_cell(model, init_inputs):
    names = {n: n for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
    cell = _loaded(nn.LSTMCell(*init_inputs), model, names)
    return lambda x, h, c: torch.cat(cell(x, (h, c)), dim=1)


def _gru_cell(model, init_inputs):
    names = {n: n for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
    return _loaded(nn.GRUCell(*init_inputs), model, names)


def _sequential(layers: Callable[..., list[nn.Module]], names: dict[str, str]):
    return lambda model, init_inputs: _loaded(nn.Sequential(*layers(*init_inputs)), model, names)


def _then(builder, finish: Callable):
    """`builder`'s module followed by `finish(output, model)` (an epilogue with no nn layer of its own)."""

    def build(model, init_inputs):
        module = builder(model, init_inputs)
        return lambda *inputs: finish(module(*inputs), model)

    return build


def _channel(vector: torch.Tensor, dims: int) -> torch.Tensor:
    return vector.view(1, -1, *([1] * dims))


def _squeeze_excitation(model, init_inputs):
    channels, reduction = init_inputs
    gate = nn.Sequential(
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(channels, channels // reduction),
        nn.ReLU(),
        nn.Linear(channels // reduction, channels),
        nn.Sigmoid(),
    )
    names = {**_weight_bias("2.", "fc1_weight", "fc1_bias"), **_weight_bias("4.", "fc2_weight", "fc2_bias")}
    gate = _loaded(gate, model, names)
    return lambda x: x * gate(x)[:, :, None, None]


_CONV_BN = {"0.weight": "conv_weight", **_bn("1.", "bn_")}
_GEMM = _weight_bias("0.")

# Keyed by "level<N>/<name>" (stable across renumbering).
NN_EQUIVALENTS = {
    "level1/conv1d": _layer(lambda cin, cout, k: nn.Conv1d(cin, cout, k, padding=k // 2)),
    "level1/conv2d": _layer(lambda cin, cout, k: nn.Conv2d(cin, cout, k, padding=1)),
    "level1/conv2d_strided_asymmetric": _layer(
        lambda cin, cout: nn.Conv2d(cin, cout, (3, 5), stride=(2, 1), padding=(1, 2), bias=False), {"weight": "weight"}
    ),
    "level1/conv3d": _layer(lambda cin, cout: nn.Conv3d(cin, cout, 3, padding=1)),
    "level1/conv_transpose1d": _layer(lambda cin, cout: nn.ConvTranspose1d(cin, cout, 4, stride=2, padding=1)),
    "level1/conv_transpose2d": _layer(lambda cin, cout: nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1)),
    "level1/conv_transpose3d": _layer(
        lambda cin, cout: nn.ConvTranspose3d(cin, cout, 3, stride=2, padding=1, output_padding=1)
    ),
    "level1/depthwise_conv2d": _layer(lambda c: nn.Conv2d(c, c, 3, padding=1, groups=c)),
    "level1/max_pool2d": _stateless(nn.MaxPool2d(3, stride=2, padding=1)),
    "level1/avg_pool3d": _stateless(nn.AvgPool3d(3, stride=2, padding=1)),
    "level1/avg_pool1d": _stateless(nn.AvgPool1d(4, stride=4)),
    "level1/relu": _stateless(nn.ReLU()),
    "level1/gelu": _stateless(nn.GELU()),
    "level1/silu": _stateless(nn.SiLU()),
    "level1/softplus": _stateless(nn.Softplus(beta=1.0, threshold=20.0)),
    "level1/hardtanh": _stateless(nn.Hardtanh(-1.0, 1.0)),
    "level1/elu": _stateless(nn.ELU(alpha=1.0)),
    "level1/leaky_relu": _stateless(nn.LeakyReLU(0.1)),
    "level1/tanh": _stateless(nn.Tanh()),
    "level1/softmax": _stateless(nn.Softmax(dim=-1)),
    "level1/log_softmax": _stateless(nn.LogSoftmax(dim=-1)),
    "level1/layer_norm": _layer(nn.LayerNorm),
    "level1/batch_norm_eval": _layer(nn.BatchNorm2d, _bn("", "")),
    "level1/group_norm": _layer(lambda c: nn.GroupNorm(16, c)),
    "level1/rms_norm": _layer(lambda h: nn.RMSNorm(h, eps=1e-6), {"weight": "weight"}),
    "level1/mse_loss": _per_row_mean(nn.MSELoss(reduction="none")),
    "level1/cross_entropy_loss": _stateless(nn.CrossEntropyLoss(reduction="none")),
    "level1/smooth_l1_loss": _per_row_mean(nn.SmoothL1Loss(reduction="none", beta=1.0)),
    "level1/kl_div_loss": _kl_div,
    "level1/cosine_embedding_loss": _stateless(nn.CosineEmbeddingLoss(margin=0.5, reduction="none")),
    "level2/gemm_bias_relu": _sequential(lambda i, o: [nn.Linear(i, o), nn.ReLU()], _GEMM),
    "level2/gemm_bias_gelu": _sequential(lambda i, o: [nn.Linear(i, o), nn.GELU()], _GEMM),
    "level2/gemm_softmax": _sequential(lambda i, o: [nn.Linear(i, o), nn.Softmax(dim=1)], _GEMM),
    "level2/gemm_silu_scale": _then(
        _sequential(lambda i, o: [nn.Linear(i, o), nn.SiLU()], _GEMM), lambda y, model: y * 2.5
    ),
    "level2/gemm_scale_residual": lambda model, init: (lambda linear: lambda x, residual: linear(x) * 0.5 + residual)(
        _layer(nn.Linear)(model, init)
    ),
    "level2/gemm_sigmoid_row_sum": _then(
        _sequential(lambda i, o: [nn.Linear(i, o), nn.Sigmoid()], _GEMM), lambda y, model: y.sum(dim=1)
    ),
    "level2/gemm_row_max": _then(_layer(nn.Linear), lambda y, model: y.max(dim=1).values),
    "level2/gemm_logsumexp": _then(_layer(nn.Linear), lambda y, model: torch.logsumexp(y, dim=1)),
    "level2/swiglu_gemm": lambda model, init: (lambda gate, up: lambda x: nn.functional.silu(gate(x)) * up(x))(
        _layer(lambda i, h: nn.Linear(i, h, bias=False), {"weight": "gate_weight"})(model, init),
        _layer(lambda i, h: nn.Linear(i, h, bias=False), {"weight": "up_weight"})(model, init),
    ),
    "level2/conv_transpose2d_bias_tanh": _then(
        _layer(
            lambda cin, cout: nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1, bias=False),
            {"weight": "conv_weight"},
        ),
        lambda y, model: torch.tanh(y - _channel(model.channel_bias, 2)),
    ),
    "level2/conv2d_tanh_scale_bias": _then(
        _sequential(
            lambda cin, cout: [nn.Conv2d(cin, cout, 3, padding=1), nn.Tanh()],
            _weight_bias("0.", "conv_weight", "conv_bias"),
        ),
        lambda y, model: y * 2.0 + _channel(model.channel_bias, 2),
    ),
    "level2/conv2d_relu_global_avgpool": _sequential(
        lambda cin, cout: [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()],
        _weight_bias("0."),
    ),
    "level2/conv_transpose3d_leaky_relu_scale": _then(
        _sequential(
            lambda cin, cout: [
                nn.ConvTranspose3d(cin, cout, 3, stride=2, padding=1, output_padding=1),
                nn.LeakyReLU(0.2),
            ],
            _weight_bias("0.", "conv_weight", "conv_bias"),
        ),
        lambda y, model: y * _channel(model.channel_scale, 3),
    ),
    "level2/layernorm_gelu": _sequential(lambda h: [nn.LayerNorm(h), nn.GELU()], _weight_bias("0.")),
    "level2/conv2d_batchnorm_relu": _sequential(
        lambda cin, cout: [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()], _CONV_BN
    ),
    "level2/conv2d_groupnorm_gelu": _sequential(
        lambda cin, cout: [nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(8, cout), nn.GELU()],
        {**_weight_bias("0.", "conv_weight", "conv_bias"), **_weight_bias("1.", "gn_weight", "gn_bias")},
    ),
    "level2/conv2d_maxpool_relu": _sequential(
        lambda cin, cout: [nn.Conv2d(cin, cout, 3, padding=1), nn.MaxPool2d(2), nn.ReLU()], _weight_bias("0.")
    ),
    "level2/conv3d_relu_avgpool": _sequential(
        lambda cin, cout: [nn.Conv3d(cin, cout, 3, padding=1), nn.ReLU(), nn.AvgPool3d(2)], _weight_bias("0.")
    ),
    "level2/residual_add_layernorm": _residual_layernorm,
    "level2/conv1d_bias_gelu": _sequential(
        lambda cin, cout: [nn.Conv1d(cin, cout, 5, padding=2), nn.GELU()], _weight_bias("0.")
    ),
    "level2/depthwise_pointwise_conv": _sequential(
        lambda cin, cout: [nn.Conv2d(cin, cin, 3, padding=1, groups=cin), nn.Conv2d(cin, cout, 1)],
        {
            **_weight_bias("0.", "depthwise_weight", "depthwise_bias"),
            **_weight_bias("1.", "pointwise_weight", "pointwise_bias"),
        },
    ),
    "level2/gemm_batchnorm_relu": _sequential(
        lambda i, o: [nn.Linear(i, o), nn.BatchNorm1d(o), nn.ReLU()], {**_GEMM, **_bn("1.", "bn_")}
    ),
    "level2/gemm_groupnorm_hardtanh": _sequential(
        lambda i, o: [nn.Linear(i, o), nn.GroupNorm(32, o), nn.Hardtanh(-2.0, 2.0)],
        {**_GEMM, **_weight_bias("1.", "gn_weight", "gn_bias")},
    ),
    "level3/mlp": _sequential(
        lambda i, h, o: [nn.Linear(i, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, o)],
        {
            **_weight_bias("0.", "fc1_weight", "fc1_bias"),
            **_weight_bias("2.", "fc2_weight", "fc2_bias"),
            **_weight_bias("4.", "fc3_weight", "fc3_bias"),
        },
    ),
    "level3/resnet_basic_block": _resnet_basic_block,
    "level3/attention_block": _attention,
    "level3/transformer_block": _transformer_block,
    "level3/lstm_cell": _lstm_cell,
    "level3/gru_cell": _gru_cell,
    "level3/depthwise_separable_block": _sequential(
        lambda cin, cout: [
            nn.Conv2d(cin, cin, 3, padding=1, groups=cin, bias=False),
            nn.BatchNorm2d(cin),
            nn.ReLU(),
            nn.Conv2d(cin, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(),
        ],
        {"0.weight": "depthwise_weight", **_bn("1.", "bn1_"), "3.weight": "pointwise_weight", **_bn("4.", "bn2_")},
    ),
    "level3/minigpt_block": _minigpt_block,
    "level3/vgg_stack": _sequential(
        lambda cin: [
            nn.Conv2d(cin, 64, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(128, 128, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        ],
        {
            **_weight_bias("0.", "conv1_weight", "conv1_bias"),
            **_weight_bias("2.", "conv2_weight", "conv2_bias"),
            **_weight_bias("5.", "conv3_weight", "conv3_bias"),
            **_weight_bias("7.", "conv4_weight", "conv4_bias"),
        },
    ),
    "level3/squeeze_excitation_block": _squeeze_excitation,
}

# Tasks whose op has no standard nn layer (plain tensor ops); their module form is still checked
# against module_fn called with explicitly gathered parameters.
NO_STANDARD_LAYER = {
    "level1/square_matmul",
    "level1/rectangular_matmul",
    "level1/batched_matmul",
    "level1/matmul_transposed_a",
    "level1/matmul_transposed_b",
    "level1/lower_triangular_matmul",
    "level1/matrix_vector",
    "level1/sum_reduction",
    "level1/mean_reduction",
    "level1/max_reduction",
    "level1/argmax",
    "level1/min_reduction",
    "level1/cumsum",
    "level1/cumprod",
    "level1/elementwise_fma",
    "level1/channel_scale_shift",
    "level1/l2_normalize",
    "level2/batched_scores_softmax",
}


def nn_equivalent(key: str, model: nn.Module, init_inputs: list) -> Callable | None:
    builder = NN_EQUIVALENTS.get(key)
    return builder(model, init_inputs) if builder else None
