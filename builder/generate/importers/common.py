"""Helpers shared by the importers: language detection and claim parsing."""

from __future__ import annotations

import math
import re
from typing import Any

from builder import pyast

# Any of these marks CUDA source; plain C++ extension code has none of them.
CUDA_MARKERS = re.compile(r"__global__|__device__|<<<|#include\s*<cuda|#include\s*<ATen/cuda|c10/cuda|\bcuda[A-Z]\w*\(")


def detect_language(source: str) -> str:
    """`python` for a KernelBench-style ModelNew file, `cuda` for device code, `cpp` for a CPU-only extension."""
    if "class ModelNew" in source and _is_python(source):
        return "python"  # checked first: a ModelNew file may hold CUDA source in a string for load_inline
    return "cuda" if CUDA_MARKERS.search(source) else "cpp"


def _is_python(source: str) -> bool:
    try:
        pyast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return True


def parse_bool(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
        return value.strip().lower() in ("true", "1", "yes")
    return None


def parse_float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) or math.isinf(number) else number


def task_name(raw: str) -> str:
    """A task-file-safe name: `13_Matmul for symmetric matrices` -> `Matmul_for_symmetric_matrices`."""
    name = re.sub(r"^\d+_", "", str(raw or "").strip())
    name = re.sub(r"\W+", "_", name).strip("_")
    return name or "task"
