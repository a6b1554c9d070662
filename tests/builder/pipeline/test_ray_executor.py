"""Ray executor on a local Ray instance (CPU backend) with the stand-in verifiers of pipeline_fakes.py: a node
engine (a Ray actor) verifies, the orchestrator stays the only writer, records are stamped with the stand-in's name,
an engine that raises sends its pairs back to the build instead of making records, a node whose control kernel
fails stops the build, workers import the checkout the build runs from, and SIGTERM interrupts a Ray build as it
does a local one. Several nodes: test_ray_nodes.py. The real engine on a real cluster: test_ray_cluster_cpu.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import ray  # noqa: E402 - a dev dependency: its absence is a failure, not a skip
from pipeline_fakes import BrokenVerifier, DyingVerifier, FailingControlVerifier, PidNotingVerifier
from pipeline_helpers import cli_env, fake_cli_command, ray_node_engines

from builder import config
from builder.errors import InfrastructureError
from builder.pipeline.build import BuildParams, Orchestrator
from builder.pipeline.store import Store

HERE = os.path.dirname(__file__)


@pytest.fixture(scope="module")
def local_ray():
    # Workers import the fake engine by name: this folder on their path, then the checkout.
    path = os.pathsep.join([HERE, str(config.REPO_ROOT)])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield
    ray.shutdown()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ray_build_stores_every_record_from_a_node_engine(tmp_path, local_ray):
    params = BuildParams(out=tmp_path / "build", backend="cpu", generator="bundled", executor="ray", tasks="^1/1$")
    orchestrator = Orchestrator(params, show_progress=False, make_verifier=PidNotingVerifier)
    orchestrator.run()
    assert orchestrator.counters.stored > 0
    with Store.open_existing(params.out) as store:
        rows = store.con.execute("SELECT error, stand_in_verifier FROM records").fetchall()
        assert store.count() == orchestrator.counters.stored
    pids = {int(error.split()[-1]) for error, _ in rows}
    assert len(pids) == 1 and os.getpid() not in pids  # one node, one engine; nothing ran in the orchestrator
    assert {stand_in for _, stand_in in rows} == {"pipeline_fakes:PidNotingVerifier"}  # a stand-in's records say so
    # Resume through Ray too: nothing is submitted twice.
    again = Orchestrator(params, show_progress=False, make_verifier=PidNotingVerifier)
    again.run()
    assert again.counters.stored == 0 and again.counters.resumed == orchestrator.counters.stored


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_an_engine_that_raises_makes_no_record_its_pairs_wait(tmp_path, local_ray):
    # Each stream's engine raises: one incident each (however many pairs it held), a new engine for the next try,
    # and the build stops after INFRA_CONSECUTIVE_FAILURES_MAX of them.
    params = BuildParams(out=tmp_path / "build", backend="cpu", generator="bundled", executor="ray", tasks="^1/19$")
    orchestrator = Orchestrator(params, show_progress=False, make_verifier=BrokenVerifier)
    with pytest.raises(InfrastructureError, match="the Ray node engine failed: RuntimeError: the engine broke"):
        orchestrator.run()
    assert orchestrator.failures_in_a_row == config.INFRA_CONSECUTIVE_FAILURES_MAX
    with Store.open_existing(params.out) as store:
        assert store.count() == 0
        waiting = store.waiting()
        assert len(waiting) > 1 and all("the engine broke" in w["reason"] for w in waiting)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_node_whose_control_kernel_fails_stops_the_build_before_any_candidate(tmp_path, local_ray):
    params = BuildParams(out=tmp_path / "build", backend="cpu", generator="bundled", executor="ray", tasks="^1/1$")
    orchestrator = Orchestrator(params, show_progress=False, make_verifier=FailingControlVerifier)
    with pytest.raises(InfrastructureError, match=r"Ray node \S+: the control kernel came out incorrect") as failed:
        orchestrator.run()
    assert f"(pid {os.getpid()})" not in str(failed.value)  # it ran on the node, in its engine's actor
    assert orchestrator.counters.stored == 0
    with Store.open_existing(params.out) as store:
        assert store.count() == 0


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_an_engine_lost_between_streams_is_replaced_and_no_pair_is_lost(local_ray):
    from builder.candidates import Candidate
    from builder.pipeline.engine_access import ExecutorSettings, make_verify_options
    from builder.pipeline.ray_executor import RayExecutor
    from builder.tasks import load_suite

    task = load_suite().select(pattern="^1/19$")[0]
    pairs = [(Candidate(task.id, f"// v{i}\n", "cpp", f"v{i}", designed_verdict="correct"), task) for i in range(4)]
    executor = RayExecutor(make_verify_options("cpu", [1]), ExecutorSettings("cpu"), PidNotingVerifier)
    try:
        first = list(executor.stream(pairs[:2]))
        (engine,) = executor.engines.values()
        ray.kill(engine.actor)  # its node keeps going: the next stream starts an engine there
        wait_until_dead(engine.actor)  # a kill lands later: a stream begun first would lose its engine mid-stream
        second = list(executor.stream(pairs[2:]))
    finally:
        executor.close()
    assert sorted(record.kernel_name for record in first + second) == ["v0", "v1", "v2", "v3"]
    pids = [{int(r.error.split()[-1]) for r in records} for records in (first, second)]
    assert len(pids[0]) == len(pids[1]) == 1 and pids[0] != pids[1]  # a new engine, in a new process


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_only_engine_lost_mid_stream_is_replaced_at_once_for_the_pairs_left(local_ray, monkeypatch):
    """The engine's process ends while the stream still has pairs it never handed over: a new engine on the live
    node takes them, rather than every one coming back unverified. Only the pairs the lost engine held return."""
    from builder.candidates import Candidate
    from builder.pipeline.engine_access import ExecutorSettings, make_verify_options
    from builder.pipeline.ray_executor import RayExecutor
    from builder.tasks import load_suite
    from builder.verify.engine.infrastructure import InfrastructureFailure

    monkeypatch.setattr(config, "RAY_ENGINE_QUEUE_PAIRS", 2)  # the engine holds two pairs; the rest wait here
    task = load_suite().select(pattern="^1/19$")[0]
    names = ["v0", "dies", "v2", "v3", "v4", "v5"]
    pairs = [(Candidate(task.id, f"// {name}\n", "cpp", name, designed_verdict="correct"), task) for name in names]
    executor = RayExecutor(make_verify_options("cpu", [1]), ExecutorSettings("cpu"), DyingVerifier)
    try:
        results = list(executor.stream(pairs))
    finally:
        executor.close()
    failures = [item for item in results if isinstance(item, InfrastructureFailure)]
    records = [item for item in results if not isinstance(item, InfrastructureFailure)]
    assert sorted([failure.candidate.kernel_name for failure in failures] + [r.kernel_name for r in records]) == sorted(
        names
    )  # every pair once, as a record or back to the build
    assert {failure.candidate.kernel_name for failure in failures} <= {"v0", "dies"}  # held by the lost engine
    assert {"v2", "v3", "v4", "v5"} <= {record.kernel_name for record in records}
    assert len({int(record.error.split()[-1]) for record in records if record.kernel_name != "v0"}) == 1


def wait_until_dead(actor, within_s: float = 60.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            continue
        time.sleep(0.1)
    raise AssertionError(f"a killed actor still answered after {within_s} s")


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


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_workers_import_the_checkout_the_build_runs_from_wherever_it_lies(tmp_path):
    # A copy of the project under /tmp and a driver started elsewhere, as an installed `kernel-archive` is: without
    # the executor's PYTHONPATH its workers would import whatever copy is installed (or none).
    copy, elsewhere = tmp_path / "checkout", tmp_path / "elsewhere"
    for package in ("builder", "schemas"):
        shutil.copytree(config.REPO_ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    elsewhere.mkdir()
    driver = f"""
import sys
sys.path.insert(0, {str(copy)!r})
import ray
from builder.pipeline.engine_access import ExecutorSettings
from builder.pipeline.ray_executor import RayExecutor

def where():
    import builder
    return builder.__file__

executor = RayExecutor(None, ExecutorSettings("cpu"))
print(ray.get(ray.remote(where).remote()))
executor.close()
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", driver], cwd=elsewhere, env=env, capture_output=True, text=True,
                          timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == str(copy / "builder" / "__init__.py")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigterm_mid_build_is_a_prompt_interrupted_exit_that_takes_its_ray_down(tmp_path):
    # ray.init puts its own SIGTERM handler in, which aborted the build (exit 134, the run left "running").
    import psutil

    out = tmp_path / "build"
    args = ["build", "--out", out, "--backend", "cpu", "--generator", "bundled", "--executor", "ray",
            "--tasks", "^1/19$", "--quiet"]  # fmt: skip
    env = cli_env(PYTHONPATH=os.pathsep.join([HERE, str(config.REPO_ROOT)]))  # node engines import the fake
    build = subprocess.Popen(fake_cli_command(*args, fake=("--slowed", "60")), env=env, cwd=config.REPO_ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 180
    while not ray_node_engines(build.pid, ".exchange") and build.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert build.poll() is None, build.communicate()[1][-2000:]
    ray_processes = psutil.Process(build.pid).children(recursive=True)
    build.send_signal(signal.SIGTERM)
    termed = time.monotonic()
    _, stderr = build.communicate(timeout=120)
    assert build.returncode == 130, stderr[-2000:]
    assert time.monotonic() - termed < 30, "the build waited for its evaluations"
    _, alive = psutil.wait_procs(ray_processes, timeout=30)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]  # a zombie has ended
    assert not alive, [p.pid for p in alive]  # its Ray, workers and their children, went with it
    with Store.open_existing(out) as store:
        assert store.count() == 0 and store.builds()[-1]["state"] == "interrupted"
