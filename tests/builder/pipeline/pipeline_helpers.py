"""Helpers of the pipeline tests (a unique module name: test dirs here are not packages, so `conftest` is ambiguous)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from builder import config

HERE = Path(__file__).resolve().parent
CLI = [sys.executable, "-c", "from builder.cli import main; main()"]
FAKE_CLI = [sys.executable, str(HERE / "fake_cli.py")]  # the CLI with a stand-in verifier (fake_cli.py)


def cli_env(**extra: str) -> dict[str, str]:
    """This environment, with this checkout first on PYTHONPATH (what `fake_cli.py` and Ray workers import)."""
    env = dict(os.environ)
    parts = [str(config.REPO_ROOT), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
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


def fake_cli_command(*args: str, fake: tuple[str, ...] = ()) -> list[str]:
    """The command line of `kernel-archive ARGS` with the fake verifier; `fake`: fake_cli.py's own options."""
    return [*FAKE_CLI, *fake, "--", *map(str, args)]


def run_fake_cli(
    *args: str, fake: tuple[str, ...] = (), env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """`kernel-archive ARGS` with the trusted fake verifier of pipeline_fakes.py (fake_cli.py)."""
    return subprocess.run(
        fake_cli_command(*args, fake=fake),
        env=env or cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=config.REPO_ROOT,
    )


# The real CPU build shared by the end-to-end tests (conftest.py `e2e`): one task, two bundled .cpp candidates.
E2E_TASK_FILE = config.TASKS_DIR / "level1" / "1_square_matmul.py"
E2E_CANDIDATES = config.CANDIDATES_DIR / "cpu" / "level1" / "1_square_matmul"
E2E_CHOSEN = {"naive.cpp": "correct", "transposed_b.cpp": "incorrect"}


def ray_node_engines(root_pid: int, running: str = "") -> list:
    """The node engines' Ray workers under `root_pid` (a build with a Ray of its own): their process title is
    `ray::NodeEngine`, and `.method` while they run one (`running`: only those running it). psutil comes with Ray."""
    import psutil

    try:
        descendants = psutil.Process(root_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for process in descendants:
        try:
            if " ".join(process.cmdline()).startswith(f"ray::NodeEngine{running}"):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def scratch_parent() -> Path:
    """Under the user's cache, not /tmp: the sandbox mounts a private /tmp, so task files and compiled
    libraries under /tmp are not what the sandboxed children see."""
    parent = Path.home() / ".cache" / "kernel-archive-tests"
    parent.mkdir(parents=True, exist_ok=True)
    return parent


def real_cpu_build(root: Path) -> dict:
    """A private data dir (the task, two candidates, the SFT template) and a finished build with the real engine."""
    data = root / "data"
    (data / "tasks" / "level1").mkdir(parents=True)
    shutil.copy(E2E_TASK_FILE, data / "tasks" / "level1")
    corpus = data / "candidates" / "cpu" / "level1" / "1_square_matmul"
    corpus.mkdir(parents=True)
    entries = []
    for name, verdict in E2E_CHOSEN.items():
        shutil.copy(E2E_CANDIDATES / name, corpus)
        entries.append({"file": name, "strategy": ["naive"], "verdict": verdict, "description": f"bundled {name}"})
    (corpus / "candidates.json").write_text(json.dumps({"candidate": entries}))
    (data / "prompts").mkdir()
    shutil.copy(config.PROMPTS_DIR / config.SFT_INSTRUCTION_TEMPLATE, data / "prompts")
    env = dict(os.environ)
    env.update(KA_DATA_DIR=str(data), KA_CACHE_DIR=str(root / "cache"), PYTHONPATH=str(config.REPO_ROOT))
    args = ["build", "--backend", "cpu", "--generator", "bundled", "--quiet"]
    done = run_cli(*args, "--out", root / "build", env=env, timeout=800)
    assert done.returncode == 0, done.stderr
    return {"root": root, "env": env, "args": args, "build": root / "build"}
