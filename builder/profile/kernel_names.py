"""Tell a candidate's own GPU kernels from library kernels (ATen, cuBLAS, cuDNN, CUTLASS, ...).

The one classifier for the torch-profiler summary (own-vs-library device time), the ncu entries
(`library` per kernel) and the verifier's `uses_torch_ops` flag, so that all three agree on what
"own" means. The name tables are config.PROFILE_LIBRARY_KERNEL_PREFIXES / _REGEX. A name-based
classifier is a heuristic: a candidate that calls cub/thrust templates gets those kernels counted as
library work, which is what they are.
"""

from __future__ import annotations

import re
from functools import lru_cache

from builder import config

_LEADING_NOISE = re.compile(r"^(?:void\s+|\(anonymous namespace\)::|\s+)+")


@lru_cache(maxsize=1)
def _library_regex() -> re.Pattern[str]:
    return re.compile(config.PROFILE_LIBRARY_KERNEL_REGEX, re.IGNORECASE)


def normalise_kernel_name(name: str) -> str:
    """Strip the `void ` return type and anonymous-namespace prefixes that demangled names carry."""
    return _LEADING_NOISE.sub("", name or "").strip()


def is_library_kernel(name: str) -> bool:
    """True when a GPU kernel (or a CUPTI memcpy/memset activity) comes from a library, not the candidate."""
    bare = normalise_kernel_name(name)
    if not bare:
        return False
    if bare.lower().startswith(config.PROFILE_LIBRARY_KERNEL_PREFIXES):
        return True
    return bool(_library_regex().match(bare))


def is_library_op(name: str) -> bool:
    """True for a CPU-side profiler op that is a library operator (aten::, c10d::, cudnn, ...)."""
    return (name or "").startswith(("aten::", "c10d::", "cudnn", "cublas", "torch::", "prim::", "cuda"))
