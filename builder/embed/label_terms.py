"""The kernel-engineering vocabulary cluster labels are written in.

A kernel contributes terms from the signals the archive records about it, never from its identifiers:
- what it computes: its op category (`op_category`), the coarse op family that category belongs to,
  and op words of its task name (`op_name`: softmax, conv3d, transposed, ...);
- how it computes it: its strategy tags (`strategy_tags`) and the libraries its code calls.

A term is a key `facet:name`; `TERM_TEXT` gives the words a label shows for it. Labels are made only of
these words, so a map legend reads "GEMM · shared-memory tiling", not "TILE, in_f, out_f".
"""

from __future__ import annotations

import re
from collections.abc import Iterable

WHAT_FACETS = ("category", "family", "op")  # terms naming what a kernel computes
HOW_FACETS = ("tag", "library")  # terms naming how it computes it

# op_category -> (words shown, coarse op family). Categories the task suites use, plus the synthetic archive's.
_CATEGORIES = {
    "matmul": ("GEMM", "gemm"),
    "gemm_epilogue": ("GEMM + epilogue", "gemm"),
    "mlp": ("MLP", "gemm"),
    "recurrent": ("RNN cells", "gemm"),
    "convolution": ("convolution", "conv"),
    "conv": ("convolution", "conv"),
    "conv_epilogue": ("convolution + epilogue", "conv"),
    "cnn_block": ("CNN blocks", "conv"),
    "pooling": ("pooling", "window"),
    "activation": ("activations", "elementwise"),
    "elementwise": ("elementwise", "elementwise"),
    "reduction": ("reductions", "rowwise"),
    "softmax": ("softmax", "rowwise"),
    "normalization": ("normalisation", "rowwise"),
    "norm": ("normalisation", "rowwise"),
    "loss": ("losses", "rowwise"),
    "cumulative": ("scans", "rowwise"),
    "attention": ("attention", "attention"),
    "transformer": ("transformer blocks", "attention"),
    "architecture": ("model blocks", "model"),
}
_FAMILIES = {
    "gemm": "GEMM",
    "conv": "convolution",
    "window": "sliding windows",
    "elementwise": "elementwise",
    "rowwise": "row reductions",
    "attention": "attention",
    "model": "model blocks",
}

# Op words of task names (`op_name` split at underscores, digits kept: conv3d, avg_pool1d).
_TASK_OPS = (
    (re.compile(r"^(?:conv_?transpose|transposed?)\w*$"), "transposed", "transposed"),
    (re.compile(r"^conv1d$"), "conv1d", "1-D"),
    (re.compile(r"^conv2d$"), "conv2d", "2-D"),
    (re.compile(r"^conv3d$"), "conv3d", "3-D"),
    (re.compile(r"^depthwise$"), "depthwise", "depthwise"),
    (re.compile(r"^(?:matvec|vector)$"), "matvec", "matrix-vector"),
    (re.compile(r"^batched$"), "batched", "batched"),
    (re.compile(r"^(?:softmax|logsumexp)$"), "softmax", "softmax"),
    (
        re.compile(r"^(?:layer_?norm|layernorm|rms_?norm|rmsnorm|group_?norm|groupnorm|batch_?norm|batchnorm)$"),
        "norm",
        "norms",
    ),
    (re.compile(r"^(?:relu|gelu|silu|swiglu|sigmoid|tanh|hardtanh|elu|softplus|leaky)$"), "activation", "activation"),
    (re.compile(r"^(?:max|min|argmax|argmin|sum|mean)$"), "reduce", "reductions"),
    (re.compile(r"^(?:cumsum|cumprod)$"), "scan", "scans"),
    (re.compile(r"^(?:max_?pool\w*|avg_?pool\w*|avgpool|maxpool)$"), "pool", "pooling"),
    (re.compile(r"^(?:lstm|gru)$"), "rnn", "RNN cells"),
    (re.compile(r"^(?:attention|scores)$"), "attention", "attention"),
)
# Task names are split at underscores, but some op words hold one (`layer_norm`, `max_pool2d`).
_JOINED_OPS = re.compile(r"(layer_norm|rms_norm|group_norm|batch_norm|max_pool\w*?(?=_|$)|avg_pool\w*?(?=_|$))")

_TAG_TEXT = {
    "naive": "naive",
    "shared_memory_tiling": "shared-memory tiling",
    "warp_shuffle": "warp shuffle",
    "vectorized_loads": "float4 loads",
    "fusion": "fused ops",
    "tensor_cores": "tensor cores",
    "grid_stride": "grid-stride loops",
    "loop_unrolling": "unrolled loops",
    "atomics": "atomics",
    "async_copy": "async copy",
}

# Libraries a kernel's code calls (comments and boilerplate already stripped by code_text.device_code).
_LIBRARIES = (
    (re.compile(r"\bcublas\w*\s*\("), "cublas", "cuBLAS"),
    (re.compile(r"\bcudnn\w*\s*\("), "cudnn", "cuDNN"),
    (re.compile(r"\bcutlass::"), "cutlass", "CUTLASS"),
    (re.compile(r"\bcub::"), "cub", "CUB"),
    (re.compile(r"\bthrust::"), "thrust", "Thrust"),
    (
        re.compile(
            r"\b(?:at|torch)::(?:matmul|mm|bmm|addmm|linear|conv\w*|softmax|log_softmax|layer_norm|batch_norm"
            r"|group_norm|gelu|relu|sigmoid|tanh|max_pool\w*|avg_pool\w*|cumsum|einsum|lstm|gru"
            r"|scaled_dot_product_attention)\s*\("
        ),
        "aten",
        "ATen ops",
    ),
)

TERM_TEXT: dict[str, str] = {
    **{f"category:{name}": text for name, (text, _) in _CATEGORIES.items()},
    **{f"family:{name}": text for name, text in _FAMILIES.items()},
    **{f"op:{key}": text for _, key, text in _TASK_OPS},
    **{f"tag:{name}": text for name, text in _TAG_TEXT.items()},
    **{f"library:{key}": text for _, key, text in _LIBRARIES},
}


def term_text(term: str) -> str:
    """Words shown for a term; a category outside the table shows its own name with spaces."""
    return TERM_TEXT.get(term) or term.split(":", 1)[1].replace("_", " ")


def vocabulary_words() -> frozenset[str]:
    """Every phrase a label can be made of (the test on the shipped sample holds labels to it)."""
    return frozenset(TERM_TEXT.values())


def task_op_terms(op_name: str | None) -> set[str]:
    if not op_name:
        return set()
    name = op_name.lower()
    words = set(_JOINED_OPS.findall(name)) | set(_JOINED_OPS.sub("_", name).split("_"))
    return {f"op:{key}" for word in words if word for pattern, key, _ in _TASK_OPS if pattern.match(word)}


def kernel_terms(
    op_category: str | None, op_name: str | None, strategy_tags: Iterable[str] | None, code: str
) -> set[str]:
    """The vocabulary terms one kernel contributes to its cluster's label."""
    terms = task_op_terms(op_name)
    if op_category:
        terms.add(f"category:{op_category}")
        family = _CATEGORIES.get(op_category, (None, None))[1]
        if family:
            terms.add(f"family:{family}")
    terms.update(f"tag:{tag}" for tag in strategy_tags or () if tag in _TAG_TEXT)
    terms.update(f"library:{key}" for pattern, key, _ in _LIBRARIES if pattern.search(code))
    return terms


def facet(term: str) -> str:
    return term.split(":", 1)[0]


# Tags that modify a strategy rather than name one (the tag rules find them in otherwise naive code): a label
# names one only when no strategy holds, so "GEMM · shared-memory tiling", not "GEMM · unrolled loops".
SECONDARY_TERMS = frozenset({"tag:grid_stride", "tag:loop_unrolling"})
