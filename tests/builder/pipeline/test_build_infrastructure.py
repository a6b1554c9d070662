"""A build whose machinery fails stores nothing and exits 75 with one error line: a sandbox that cannot start, an
interpreter the sandbox hides, a compiler killed by a signal (the preflight's control kernel, real engine); pairs
the machinery fails mid-build go back to the queue, wait in the store, and stop the build after a few in a row."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest
from pipeline_helpers import run_cli, run_fake_cli, scratch_parent

from builder import config
from builder.errors import ExitCode
from builder.pipeline.store import Store
from builder.verify.sandbox import bubblewrap

TASK = "^1/19$"  # relu: three bundled CPU candidates
FAKE_BWRAP = """#!/bin/sh
for last; do :; done
[ "$last" = true ] && exit 0  # bwrap's usability probe passes: only a real sandbox fails
echo "bwrap: Can't mount proc on /newroot/proc: Operation not permitted" >&2
exit 1
"""
KILLED_COMPILER = "#!/bin/sh\nkill -KILL $$\n"


def executable(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


def real_env(root: Path, **extra: str) -> dict[str, str]:
    """The real engine's environment, with a cache of the test's own."""
    env = dict(os.environ)
    env.update(KA_CACHE_DIR=str(root / "cache"), PYTHONPATH=str(config.REPO_ROOT), **extra)
    return env


def assert_stopped_and_nothing_kept(done, root: Path, *fragments: str) -> None:
    assert done.returncode == ExitCode.INFRASTRUCTURE, done.stderr
    *before, line = done.stderr.strip().splitlines()
    assert line.startswith("error: preflight failed, nothing was verified or stored: the control kernel ")
    assert all(fragment in line for fragment in fragments), line
    # One error line; before it at most the engine's warnings about the same broken sandbox, never a traceback.
    assert all(
        earlier.startswith(("evaluation children are exec'd", "compile children are exec'd")) for earlier in before
    ), before
    with Store.open_existing(root / "out") as store:
        assert store.count() == 0 and store.builds()[-1]["state"] == "failed"
    assert not list((root / "cache").rglob("result.json")), "a failure of the machinery was cached"
    assert not (root / "cache" / config.PREFLIGHT_CACHE_SUBDIR).exists()


@pytest.fixture
def root():
    # Not under /tmp: the fake tools must be what the sandbox sees, whatever it shows of /tmp.
    path = Path(tempfile.mkdtemp(dir=scratch_parent(), prefix="infra-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def build(root: Path, env: dict[str, str], timeout: float = 300):
    args = ["build", "--out", root / "out", "--backend", "cpu", "--generator", "bundled", "--tasks", TASK, "--quiet"]
    return run_cli(*args, env=env, timeout=timeout)


@pytest.mark.skipif(not bubblewrap.bwrap_usable(), reason="bubblewrap not usable here")
def test_a_sandbox_that_cannot_start_stops_the_build_before_any_record(root):
    fake = executable(root / "bin", "bwrap", FAKE_BWRAP)
    done = build(root, real_env(root, PATH=f"{fake}{os.pathsep}{os.environ['PATH']}"))
    assert_stopped_and_nothing_kept(done, root, "did not compile", "the sandbox did not start",
                                    "bwrap: Can't mount proc")  # fmt: skip


@pytest.mark.skipif(not bubblewrap.bwrap_usable(), reason="bubblewrap not usable here")
def test_an_interpreter_the_sandbox_hides_stops_the_build_before_any_record(root):
    venv = Path(sys.prefix)  # a folder whose secrets the sandbox hides: here, the interpreter's own
    done = build(root, real_env(root, HF_HOME=str(venv)))
    # an exec'd compile child's sandbox does not start; a forked one's sees no interpreter
    assert_stopped_and_nothing_kept(done, root, "the sandbox ", sys.executable)


def test_a_compiler_killed_by_a_signal_stops_the_build_before_any_record(root):
    fake = executable(root / "bin", "c++", KILLED_COMPILER)
    done = build(root, real_env(root, PATH=f"{fake}{os.pathsep}{os.environ['PATH']}"))
    assert_stopped_and_nothing_kept(done, root, "the compiler was killed by a signal", "exit status 137")


def test_pairs_the_machinery_keeps_failing_wait_unrecorded_and_stop_the_build(tmp_path):
    done = run_fake_cli("build", "--out", tmp_path, "--backend", "cpu", "--generator", "bundled", "--tasks", TASK,
                        "--quiet", fake=("--failing", "always"))  # fmt: skip
    assert done.returncode == ExitCode.INFRASTRUCTURE, done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1
    assert f"failed {config.INFRA_CONSECUTIVE_FAILURES_MAX} times in a row" in line and "bwrap: fake" in line
    with Store.open_existing(tmp_path) as store:
        assert store.count() == 0
        waiting = store.waiting()
    assert len(waiting) == config.INFRA_CONSECUTIVE_FAILURES_MAX and {w["failures"] for w in waiting} == {1}
    status = run_cli("status", tmp_path)
    assert status.returncode == 0, status.stderr
    assert f"waiting after a failure of the builder's machinery (no record; a rerun retries them): " \
           f"{len(waiting)} pair(s)" in " ".join(status.stdout.split())  # fmt: skip


def test_a_pair_the_machinery_failed_once_is_retried_and_recorded(tmp_path):
    done = run_fake_cli("build", "--out", tmp_path, "--backend", "cpu", "--generator", "bundled", "--tasks", TASK,
                        "--quiet", fake=("--failing", "once"))  # fmt: skip
    # The first pair fails, the others are recorded, and its retry is recorded: it waits no more.
    assert done.returncode == 0, done.stderr
    with Store.open_existing(tmp_path) as store:
        assert store.count() == 3 and store.waiting() == []
    assert "waiting after" not in run_cli("status", tmp_path).stdout


def test_the_pairs_one_lost_engine_held_count_as_one_failure_in_a_row(tmp_path):
    # More pairs than INFRA_CONSECUTIVE_FAILURES_MAX lost together are one incident: the build goes on, and
    # their retries are recorded.
    from pipeline_fakes import LostEngineVerifier

    from builder.pipeline.build import BuildParams, Orchestrator

    params = BuildParams(out=tmp_path, backend="cpu", generator="bundled", tasks="^1/")
    orchestrator = Orchestrator(params, show_progress=False, make_verifier=LostEngineVerifier)
    orchestrator.run()
    lost = orchestrator.counters.machinery_failures
    assert lost > config.INFRA_CONSECUTIVE_FAILURES_MAX
    with Store.open_existing(tmp_path) as store:
        assert store.count() == lost and store.waiting() == []
