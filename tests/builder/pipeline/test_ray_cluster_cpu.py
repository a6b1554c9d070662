"""`--executor ray` on a real local Ray cluster with the real engine (CPU backend, sandboxed children, no fakes):
the same kernels and verdicts as the local executor's build, a Ray worker SIGKILLed while it evaluates costs no
record, and a rerun resumes with nothing lost or duplicated.

The build is the end-to-end one (conftest.py `e2e`: one task, two bundled .cpp candidates) run again through the
command line, whose executor starts a Ray cluster of its own on this machine's cores: Ray workers import the
checkout from wherever it lies. Its compile cache and baselines are reused, so the Ray build only evaluates.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time

import pytest
from pipeline_helpers import CLI, ray_node_engines, run_cli

from builder import config
from builder.pipeline.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def verdicts(build_dir) -> dict[tuple[str, str], tuple]:
    with Store.open_existing(build_dir) as store:
        rows = store.con.execute(
            "SELECT task_id, kernel_id, status, flags, stand_in_verifier FROM records ORDER BY kernel_id"
        ).fetchall()
        total, distinct = store.con.execute(
            "SELECT count(*), count(DISTINCT (task_id, kernel_id)) FROM records"
        ).fetchall()[0]
    assert total == distinct, "a record was stored twice"
    return {(task, kernel): (status, sorted(flags), stand_in) for task, kernel, status, flags, stand_in in rows}


def test_ray_cluster_build_matches_the_local_one_and_a_killed_worker_loses_no_record(e2e):
    out = e2e["root"] / "ray"
    out.mkdir()
    if (e2e["build"] / "baselines").is_dir():  # a cache: then only evaluation is left to do
        shutil.copytree(e2e["build"] / "baselines", out / "baselines")
    args = [*e2e["args"], "--executor", "ray", "--out", str(out)]
    build = subprocess.Popen([*CLI, *args], env=e2e["env"], cwd=config.REPO_ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    killed = None
    deadline = time.monotonic() + 600
    while killed is None and build.poll() is None and time.monotonic() < deadline:
        workers = ray_node_engines(build.pid, ".exchange")
        if workers:
            killed = workers[0]
            killed.send_signal(signal.SIGKILL)
            killed.wait(timeout=30)
        time.sleep(0.02)
    stdout, stderr = build.communicate(timeout=600)
    assert killed is not None, f"no node engine was seen streaming: {stderr[-2000:]}"
    assert build.returncode == 0, stderr[-2000:]
    local = verdicts(e2e["build"])
    assert verdicts(out) == local  # the same kernels, statuses and flags; no record stored twice
    assert {stand_in for *_, stand_in in local.values()} == {None}  # the real engine's records carry no stamp
    with Store.open_existing(out) as store:
        assert store.waiting() == []
    # Resumed through Ray: every pair is already stored, nothing is verified again, nothing added.
    again = run_cli(*args, env=e2e["env"], timeout=600)
    assert again.returncode == 0, again.stderr
    assert "0 new record(s), 2 already stored" in again.stdout
    assert verdicts(out) == local
