"""Fixtures of the pipeline tests: a fake-verifier environment, a small build and its export (built once)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from builder import config

HERE = Path(__file__).resolve().parent
CLI = [sys.executable, "-c", "from builder.cli import main; main()"]


def fake_env(**extra: str) -> dict[str, str]:
    """Environment for a CLI subprocess whose verifier is the trusted fake in pipeline_fakes.py."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(config.REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    env[config.VERIFIER_OVERRIDE_ENV] = "pipeline_fakes:FakeVerifier"
    env.update(extra)
    return env


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *map(str, args)],
        env=env or dict(os.environ),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=config.REPO_ROOT,
    )


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
