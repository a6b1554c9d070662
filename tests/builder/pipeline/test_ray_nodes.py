"""`--executor ray` over several nodes: a real Ray cluster on this machine (a head from `ray.cluster_utils`, a second
node joining by `ray start --address`, as on a cluster), with a stand-in verifier that notes which process made each record. A node that joins mid-build gets a node engine
and takes a share of the pairs; a node lost mid-build costs no record (its pairs go back to the build, one incident,
and the head's engine verifies them); nothing is stored twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import ray
from pipeline_fakes import BROKEN_NODE_VARIABLE, BrokenNodeVerifier, PidNotingVerifier
from pipeline_helpers import ray_node_engines
from ray.cluster_utils import Cluster

from builder import config
from builder.pipeline.build import BuildParams, Orchestrator
from builder.pipeline.store import Store

HERE = os.path.dirname(__file__)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
def cluster():
    head = {"num_cpus": 1, "object_store_memory": 100 * 2**20, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    path = os.pathsep.join([HERE, str(config.REPO_ROOT)])  # node engines import the stand-in by name
    ray.init(address=cluster.address, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def stored(out) -> int:
    try:
        return json.loads((out / config.BUILD_PROGRESS_NAME).read_text()).get("stored", 0)
    except (OSError, ValueError):
        return 0


def join(cluster: Cluster, **env: str) -> subprocess.Popen:
    """A node joining the cluster as on a cluster (`ray start --address`), its workers seeing `env`."""
    command = [Path(sys.executable).with_name("ray"), "start", "--address", cluster.address, "--num-cpus", "1",
               "--object-store-memory", str(100 * 2**20), "--block"]  # fmt: skip
    return subprocess.Popen(command, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def kill(node: subprocess.Popen) -> None:
    """The node's raylet and workers, its engine's actor among them, all at once (a machine lost)."""
    lost = [psutil.Process(node.pid), *psutil.Process(node.pid).children(recursive=True)]
    for process in lost:
        process.kill()
    psutil.wait_procs(lost, timeout=60)


def test_a_node_that_joins_takes_pairs_and_a_node_lost_mid_build_loses_none(tmp_path, cluster, monkeypatch):
    monkeypatch.setattr(config, "RAY_NODE_SCAN_S", 1.0)  # look for the new node often
    monkeypatch.setattr(config, "RAY_ENGINE_QUEUE_PAIRS", 2)  # each engine a pair or two ahead: the nodes share
    out = tmp_path / "build"
    params = BuildParams(out=out, backend="cpu", generator="bundled", executor="ray")
    events: dict[str, int] = {}

    def join_then_leave() -> None:
        deadline = time.monotonic() + 300
        while stored(out) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        events["joined_after"] = stored(out)
        node = join(cluster)
        while not ray_node_engines(node.pid, ".exchange") and time.monotonic() < deadline:  # its engine streams
            time.sleep(0.1)
        started = stored(out)
        while stored(out) < started + 2 and time.monotonic() < deadline:  # both engines at work a while
            time.sleep(0.1)
        events["left_after"] = stored(out)
        kill(node)

    mover = threading.Thread(target=join_then_leave, daemon=True)
    mover.start()
    orchestrator = Orchestrator(params, show_progress=False, make_verifier=PidNotingVerifier.slowed(2.0))
    orchestrator.run()
    mover.join(timeout=60)
    assert "left_after" in events, events
    with Store.open_existing(out) as store:
        rows = store.con.execute("SELECT task_id, kernel_id, error FROM records").fetchall()
        assert store.waiting() == []
    keys = [(task, kernel) for task, kernel, _ in rows]
    assert len(keys) == len(set(keys)) == orchestrator.counters.generated  # every pair once
    pids = {int(error.split()[-1]) for *_, error in rows}
    assert len(pids) == 2 and os.getpid() not in pids, pids  # the joined node's engine made records too
    assert orchestrator.counters.machinery_failures >= 1, events  # the lost node's pairs came back, were redone
    assert orchestrator.failures_in_a_row == 0


def test_a_node_that_joins_and_fails_its_control_kernel_is_left_out(tmp_path, cluster, monkeypatch, caplog):
    monkeypatch.setattr(config, "RAY_NODE_SCAN_S", 1.0)
    monkeypatch.setattr(config, "RAY_ENGINE_QUEUE_PAIRS", 2)
    out = tmp_path / "build"
    params = BuildParams(out=out, backend="cpu", generator="bundled", executor="ray")
    nodes: list[subprocess.Popen] = []

    def join_broken() -> None:
        deadline = time.monotonic() + 300
        while stored(out) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        nodes.append(join(cluster, **{BROKEN_NODE_VARIABLE: "1"}))

    joiner = threading.Thread(target=join_broken, daemon=True)
    joiner.start()
    try:
        orchestrator = Orchestrator(params, show_progress=False, make_verifier=BrokenNodeVerifier.slowed(2.0))
        orchestrator.run()
        joiner.join(timeout=60)
    finally:
        for node in nodes:
            kill(node)
    assert nodes, "the second node never joined"
    assert any("is left out of this build" in r.getMessage() and "control kernel" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]  # fmt: skip
    with Store.open_existing(out) as store:
        errors = [error for (error,) in store.con.execute("SELECT error FROM records").fetchall()]
        assert store.waiting() == []
    assert len(errors) == orchestrator.counters.generated
    assert len({int(error.split()[-1]) for error in errors}) == 1  # the head's engine made them all
    assert orchestrator.counters.machinery_failures == 0
