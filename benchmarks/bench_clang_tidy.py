"""Seconds per file of the clang-tidy profile (builder.profile.clang_tidy) in each mode.

    .venv/bin/python benchmarks/bench_clang_tidy.py

Prints wall and CPU seconds (clang-tidy's own user+sys time) per file and the machine. Wall time
depends on what else runs; CPU seconds are the comparable figure. torch's headers dominate.
"""

from __future__ import annotations

import os
import platform
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from builder.profile.clang_tidy import clang_tidy_version, cuda_toolkit_root, run_clang_tidy  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "profile"
CASES = (
    ("C++ without torch headers", FIXTURES / "known_bugs.cpp", "cpp"),
    ("C++ extension with <torch/extension.h>", FIXTURES / "torch_candidate.cpp", "cpp"),
    (".cu without torch headers", FIXTURES / "kernel_bugs.cu", "cuda"),
    (".cu with <torch/extension.h> (bundled smem_tiled)",
     REPO / "data" / "candidates" / "cuda" / "level1" / "1_square_matmul" / "smem_tiled.cu", "cuda"),
)  # fmt: skip


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"clang-tidy {clang_tidy_version()}; CUDA toolkit: {cuda_toolkit_root() or 'none (reduced mode)'}")
    for label, path, language in CASES:
        if not path.is_file():
            print(f"{label}: skipped ({path} missing)")
            continue
        cpu_before, started = children_cpu_seconds(), time.monotonic()
        result = run_clang_tidy(path.read_text(), language, timeout_s=1800)
        wall, cpu = time.monotonic() - started, children_cpu_seconds() - cpu_before
        outcome = result.get("error") or f"mode {result['mode']}, counts {result['counts']}"
        print(f"{label}: wall {wall:.1f} s, cpu {cpu:.1f} s ({outcome})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
