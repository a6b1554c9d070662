"""Fixtures of the pipeline tests: a small build with the fake verifier and its export, and a real CPU build
(each built once per session)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from pipeline_helpers import real_cpu_build, run_cli, run_fake_cli, scratch_parent


@pytest.fixture(scope="session")
def fake_build(tmp_path_factory) -> Path:
    """A build dir made by `kernel-archive build` over the bundled CPU candidates with the fake verifier."""
    out = tmp_path_factory.mktemp("fake_build") / "build"
    done = run_fake_cli("build", "--out", out, "--backend", "cpu", "--generator", "bundled", "--quiet")
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="session")
def fake_dataset(fake_build, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fake_dataset") / "dataset"
    done = run_cli("export", fake_build, "--out", out)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="session")
def e2e():
    """A finished real CPU build (pipeline_helpers.real_cpu_build): {"root", "env", "args", "build"}; the
    end-to-end and round-trip tests share it, and its compile cache, under root."""
    root = Path(tempfile.mkdtemp(prefix="e2e-", dir=scratch_parent()))
    try:
        yield real_cpu_build(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
