"""Which ATen names are compute, for the parent's two readings of library use (trusted parent side).

`static_scan` reads them in a candidate's source and `extension_symbols` in its built extension's imports.
Both ask the same two questions of a name: is it an ATen operator at all (`is_op`), and is it one whose work
is the task's main work (`is_heavy`) or only glue (`is_glue`: allocation, views, copies, the census's own list).

Operator names come from the headers torch ships for extensions (`ATen/ops/<op>_ops.h`, one per operator):
exactly the set an extension can name, read from files without importing torch.
"""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from pathlib import Path

from builder import config

# Heavy compute: whoever calls these has handed the main work to a library.
HEAVY_OPS = (
    "matmul|mm|bmm|addmm|addbmm|baddbmm|addmv|mv|dot|einsum|linear|bilinear|tensordot|chain_matmul|"
    "conv\\w*|_convolution|convolution\\w*|cudnn_\\w+|max_pool\\w*|avg_pool\\w*|adaptive_\\w*pool\\w*|"
    "layer_norm|group_norm|batch_norm|instance_norm|rms_norm|softmax|log_softmax|scaled_dot_product_attention|"
    "cross_entropy|nll_loss|mse_loss|kl_div|cumsum|cumprod|sort|topk|lstm|gru"
)
# An operator's C++ names add an overload (`softmax_int`), an out form (`mm_out`, `mm_outf`) or an in-place `_`
# to its name, and ATen's private variants lead with `_` (`_softmax`, `_addmm_activation`).
_HEAVY_NAME = re.compile(rf"_*(?:{HEAVY_OPS})(?:_\w*)?")
_SUFFIXES = ("_symint", "_outf", "_out", "_")
# Without the headers (no torch to build against, so no extension either) an operator name is read by its form.
_OP_FORM = re.compile(r"_*[a-z][a-z0-9_]*")


def _headers_dir() -> Path | None:
    spec = importlib.util.find_spec("torch")
    for location in (spec.submodule_search_locations or []) if spec else []:
        ops = Path(location) / "include" / "ATen" / "ops"
        if ops.is_dir():
            return ops
    return None


@lru_cache(maxsize=1)
def op_names() -> frozenset[str]:
    """Every ATen operator's base name (`mm`, `softmax`, `_softmax`), from torch's headers; empty without them."""
    ops = _headers_dir()
    if ops is None:
        return frozenset()
    return frozenset(path.name[: -len("_ops.h")] for path in ops.glob("*_ops.h"))


def base_name(name: str) -> str:
    """`mm_out` -> `mm`, `add_` -> `add`, `softmax_int` -> `softmax` (the longest operator name it starts with)."""
    known = op_names()
    if name in known:
        return name
    trimmed = name
    for suffix in _SUFFIXES:
        if trimmed.endswith(suffix) and trimmed[: -len(suffix)] in known:
            return trimmed[: -len(suffix)]
    parts = name.split("_")
    for end in range(len(parts) - 1, 0, -1):  # an overload name after the operator's (`softmax_int`)
        prefix = "_".join(parts[:end])
        if prefix in known:
            return prefix
    return name


def is_op(name: str) -> bool:
    """An ATen operator's C++ name (`mm`, `mm_out`, `tanh_`), not a helper that shares a namespace with them
    (`at::cuda::getCurrentDeviceProperties`, `at::cpu::is_avx2_supported`)."""
    known = op_names()
    if not known:
        return bool(_OP_FORM.fullmatch(name))
    return base_name(name) in known


def is_heavy(name: str) -> bool:
    return bool(_HEAVY_NAME.fullmatch(name))


@lru_cache(maxsize=1)
def _glue() -> frozenset[str]:
    return frozenset(op.removeprefix("aten::") for op in config.CPU_ALLOWED_ATEN_OPS) | config.TORCH_ALLOCATION_NAMES


def is_glue(name: str) -> bool:
    """Allocation, views and copies (the census's allowed ops): no task's main work, whatever path reaches them."""
    glue = _glue()
    return (
        name in glue
        or base_name(name) in glue
        or any(name.startswith(f"{op}_") for op in config.TORCH_ALLOCATION_NAMES)
    )
