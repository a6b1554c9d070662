"""Helpers of the pipeline tests (a unique module name: test dirs here are not packages, so `conftest` is ambiguous)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
