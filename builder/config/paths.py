"""Where the builder finds its data and keeps its caches (`KA_DATA_DIR`, `KA_CACHE_DIR` move them)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KA_DATA_DIR", REPO_ROOT / "data"))
TASKS_DIR = DATA_DIR / "tasks"
CANDIDATES_DIR = DATA_DIR / "candidates"
PROMPTS_DIR = DATA_DIR / "prompts"
SAMPLE_ARCHIVE_DIR = DATA_DIR / "sample"
CACHE_DIR = Path(os.environ.get("KA_CACHE_DIR", Path.home() / ".cache" / "kernel-archive"))
