"""Shared test setup: GPU tests are skipped on machines without a CUDA device."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Every test's builds (and the CLI runs they start) share one byte-code folder: a warm-up per test's cache would
# compile torch's modules again each time.
os.environ.setdefault("KA_BYTECODE_DIR", str(Path.home() / ".cache" / "kernel-archive" / "bytecode"))


@pytest.fixture(scope="session")
def shared_cache_dir(tmp_path_factory) -> Path:
    """One builder cache (`KA_CACHE_DIR`'s layout: `compile/`, `baselines/`, ...) for the session's tests that test
    what is built rather than the cache: a source one of them compiled (~20-40 s of a core through torch's headers)
    is found built by the next, and a task's baselines are measured once. Tests of the caches keep their own."""
    return tmp_path_factory.mktemp("shared-cache")


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run on a GPU box)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
