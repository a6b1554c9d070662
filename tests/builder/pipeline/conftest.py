"""Fixtures of the pipeline tests: a small build with the fake verifier and its export (built once)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pipeline_helpers import fake_env, run_cli


@pytest.fixture(scope="session")
def fake_build(tmp_path_factory) -> Path:
    """A build dir made by `kernel-archive build` over the bundled CPU candidates with the fake verifier."""
    out = tmp_path_factory.mktemp("fake_build") / "build"
    done = run_cli("build", "--out", out, "--backend", "cpu", "--generator", "bundled", "--quiet", env=fake_env())
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="session")
def fake_dataset(fake_build, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fake_dataset") / "dataset"
    done = run_cli("export", fake_build, "--out", out)
    assert done.returncode == 0, done.stderr
    return out
