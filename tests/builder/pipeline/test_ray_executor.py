"""Ray executor on a local Ray instance (CPU backend): compile and evaluate run as Ray tasks in worker
processes, the orchestrator stays the only writer. Skipped when Ray is not installed."""

from __future__ import annotations

import os

import pytest

from builder import config
from builder.pipeline.build import BuildParams, Orchestrator
from builder.pipeline.store import Store

ray = pytest.importorskip("ray")

HERE = os.path.dirname(__file__)


@pytest.fixture
def local_ray(monkeypatch):
    # Workers import the fake engine by name: put it on the path they inherit.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([HERE, str(config.REPO_ROOT)]))
    monkeypatch.setenv(config.RAY_ENGINE_OVERRIDE_ENV, "pipeline_fakes")
    monkeypatch.delenv(config.VERIFIER_OVERRIDE_ENV, raising=False)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"]}},
    )
    yield
    ray.shutdown()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ray_build_stores_every_record_from_worker_processes(tmp_path, local_ray):
    params = BuildParams(out=tmp_path / "build", backend="cpu", generator="bundled", executor="ray", tasks="^1/1$")
    orchestrator = Orchestrator(params, show_progress=False)
    orchestrator.run()
    assert orchestrator.counters.stored > 0
    with Store.open_existing(params.out) as store:
        rows = store.con.execute("SELECT error FROM records").fetchall()
        assert store.count() == orchestrator.counters.stored
    pids = set()
    for (error,) in rows:
        compiled_pid, evaluated_pid = (int(part.split()[-1]) for part in error.split(", "))
        pids |= {compiled_pid, evaluated_pid}
    assert os.getpid() not in pids  # nothing ran in the orchestrator's process
    # Resume through Ray too: nothing is submitted twice.
    again = Orchestrator(params, show_progress=False)
    again.run()
    assert again.counters.stored == 0 and again.counters.resumed == orchestrator.counters.stored


def test_an_address_nothing_listens_on_is_a_quick_one_line_error(tmp_path):
    import socket

    from pipeline_helpers import run_cli

    from builder.errors import UsageError
    from builder.pipeline.ray_executor import check_reachable

    with socket.socket() as probe:  # a port that was just free: nothing listens there now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(UsageError, match=f"cannot reach the Ray cluster at 127.0.0.1:{port}"):
        check_reachable(f"127.0.0.1:{port}")
    with pytest.raises(UsageError, match="expected HOST:PORT"):
        check_reachable("just-a-host")
    done = run_cli("build", "--out", tmp_path / "build", "--backend", "cpu", "--executor", "ray",
                   "--ray-address", f"ray://127.0.0.1:{port}", "--tasks", "1/19")  # fmt: skip
    assert done.returncode == 2 and done.stderr.strip().startswith("error: cannot reach the Ray cluster")
