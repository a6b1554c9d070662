"""The orchestrator: generator driving, resume without duplicates, SIGKILL mid-run, CLI errors, and the stamp on
records that a stand-in verifier made."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from pipeline_fakes import FakeVerifier
from pipeline_helpers import cli_env, fake_cli_command, run_cli, run_fake_cli

from builder import config
from builder.candidates import Candidate
from builder.errors import UsageError
from builder.generate.base import Generator
from builder.pipeline import build as build_module
from builder.pipeline.build import BuildParams, Orchestrator, parse_levels, resolve_generator
from builder.pipeline.engine_access import ExecutorSettings, make_verify_options
from builder.pipeline.executors import LocalExecutor
from builder.pipeline.store import Store


def test_auto_generator_picks_llm_only_when_an_endpoint_is_configured():
    assert resolve_generator("auto", {}) == "bundled"
    assert resolve_generator("auto", {"OPENAI_BASE_URL": "http://x"}) == "llm"
    assert resolve_generator("auto", {"KA_MODEL": "m"}) == "llm"
    assert resolve_generator("import", {"KA_MODEL": "m"}) == "import"
    with pytest.raises(UsageError):
        resolve_generator("magic", {})


def test_levels_parse_and_reject_junk():
    assert parse_levels("3,1,1") == [1, 3]
    assert parse_levels(None) is None
    for bad in ("x", "0", ","):
        with pytest.raises(UsageError):
            parse_levels(bad)


class TwoRoundGenerator(Generator):
    """Round 2 depends on round 1's verdicts (like the llm generator); round 1 repeats a candidate."""

    name = "tworound"

    def __init__(self):
        super().__init__()
        self.received: list[list] = []

    def run(self, tasks):
        task = tasks[0]
        first = [
            Candidate(task.id, f"// v{i}\n", "cpp", f"v{i}", generator="llm", designed_verdict="correct")
            for i in range(3)
        ]
        records = yield first + [first[0]]
        self.received.append(records)
        correct = sorted(r.kernel_id for r in records if r.status == "correct")
        records = yield [
            Candidate(task.id, f"// child of {correct[0]}\n", "cpp", "child", generator="llm", parent_ids=correct[:1])
        ]
        self.received.append(records)


def run_two_rounds(tmp_path, monkeypatch):
    generator = TwoRoundGenerator()
    monkeypatch.setattr(Orchestrator, "_make_generator", lambda self, store: generator)
    params = BuildParams(out=tmp_path, backend="cpu", tasks="^1/1$")
    orchestrator = Orchestrator(params, show_progress=False, make_verifier=FakeVerifier)
    orchestrator.run()
    return orchestrator, generator


def test_batches_are_stored_deduplicated_and_resumed_with_their_verdicts(tmp_path, monkeypatch):
    first, generator = run_two_rounds(tmp_path, monkeypatch)
    assert first.counters.stored == 4 and first.counters.resumed == 0
    assert [len(r) for r in generator.received] == [3, 1]
    second, generator = run_two_rounds(tmp_path, monkeypatch)
    # Nothing re-verified, but the generator still sees every verdict, so its later rounds are the same.
    assert second.counters.stored == 0 and second.counters.resumed == 4
    assert [len(r) for r in generator.received] == [3, 1]
    assert {r.status for r in generator.received[0]} == {"correct"}
    with Store.open_existing(tmp_path) as store:
        assert store.count() == 4
        states = [b["state"] for b in store.builds()]
    assert states == ["finished", "finished"]


class KeyHoldingGenerator(Generator):
    """A generator with an API key that its one candidate quotes (a model echoing its prompt's context)."""

    name = "keyholding"
    key = "gen-secret-key-12345"

    def secrets(self):
        return [self.key]

    def run(self, tasks):
        yield [Candidate(tasks[0].id, f"// made with {self.key}\n", "cpp", "echo", generator="llm")]


def test_no_stored_record_shows_the_generators_key(tmp_path, monkeypatch):
    monkeypatch.setattr(Orchestrator, "_make_generator", lambda self, store: KeyHoldingGenerator())
    params = BuildParams(out=tmp_path, backend="cpu", tasks="^1/1$")
    Orchestrator(params, show_progress=False, make_verifier=FakeVerifier).run()
    with Store.open_existing(tmp_path) as store:
        ((code,),) = store.con.execute("SELECT cuda_code FROM records").fetchall()
    assert code == "// made with [redacted]\n"


def test_sigkill_mid_build_loses_nothing_committed_and_rerun_completes_without_duplicates(tmp_path):
    out = tmp_path / "build"
    args = ["build", "--out", str(out), "--backend", "cpu", "--generator", "bundled", "--quiet"]
    proc = subprocess.Popen(
        fake_cli_command(*args, fake=("--slowed", "0.4")),
        env=cli_env(),
        cwd=config.REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    snapshot_path = out / config.BUILD_PROGRESS_NAME
    deadline = time.monotonic() + 60
    stored_before_kill = 0
    while time.monotonic() < deadline:
        try:
            stored_before_kill = json.loads(snapshot_path.read_text())["stored"]
        except (OSError, ValueError, KeyError):
            stored_before_kill = 0
        if stored_before_kill >= 3:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert stored_before_kill >= 3, "the build never got going"
    with Store.open_existing(out) as store:
        survived = store.done_keys()
        (run,) = store.builds()
    assert len(survived) >= stored_before_kill  # every commit it reported is on disk
    assert run["state"] == "running"  # killed: never marked finished
    rerun = run_fake_cli(*args)
    assert rerun.returncode == 0, rerun.stderr
    with Store.open_existing(out) as store:
        total, distinct = store.con.execute(
            "SELECT count(*), count(DISTINCT (task_id, kernel_id)) FROM records"
        ).fetchall()[0]
        final = store.done_keys()
        runs = store.builds()
    bundled = run_fake_cli(*args[:2], str(tmp_path / "fresh"), *args[3:])
    assert bundled.returncode == 0
    with Store.open_existing(tmp_path / "fresh") as store:
        expected = store.done_keys()
    assert survived <= final and final == expected and total == distinct == len(expected)
    assert runs[-1]["state"] == "finished" and runs[-1]["counts"]["resumed"] == len(survived)


def test_cuda_backend_without_a_gpu_is_a_clear_error(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from builder.errors import NoGpuError

    with pytest.raises(NoGpuError, match="--backend cpu"):
        build_module.run_build(BuildParams(out=tmp_path, backend="cuda"), show_progress=False)


def test_cli_build_errors_are_one_line(tmp_path):
    done = run_cli("build", "--out", tmp_path / "b", "--backend", "cpu", "--tasks", "no-such-task")
    assert done.returncode == 2
    assert done.stderr.strip().startswith("error: no tasks match") and len(done.stderr.strip().splitlines()) == 1


def test_records_a_stand_in_made_are_stamped_with_its_name_and_the_real_engines_are_not(tmp_path, monkeypatch):
    monkeypatch.setattr(Orchestrator, "_make_generator", lambda self, store: TwoRoundGenerator())
    params = BuildParams(out=tmp_path, backend="cpu", tasks="^1/1$")
    Orchestrator(params, show_progress=False, make_verifier=FakeVerifier.slowed(0.0)).run()
    with Store.open_existing(tmp_path) as store:
        stamps = {stamp for (stamp,) in store.con.execute("SELECT stand_in_verifier FROM records").fetchall()}
    assert stamps == {"pipeline_fakes:FakeVerifier"}
    # The real engine's executor stamps nothing (its stored records: test_e2e_cpu.py, test_ray_cluster_cpu.py).
    real = LocalExecutor(make_verify_options("cpu", [1]), ExecutorSettings("cpu"))
    try:
        assert real.stand_in is None
    finally:
        real.close()


def test_build_and_reverify_say_when_candidates_run_without_bubblewrap(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from typer.testing import CliRunner

    from builder.cli import app
    from builder.pipeline import reverify_run
    from builder.verify.sandbox import bubblewrap

    done = SimpleNamespace(notes=[], counters=SimpleNamespace(stored=0, resumed=0, by_status={}))
    monkeypatch.setattr(build_module, "run_build", lambda params, show_progress: done)
    report = {"kernels": 0, "backend": "cpu", "verdict": "nothing to compare"}
    monkeypatch.setattr(reverify_run, "run_reverify", lambda params: (report, tmp_path))
    runner = CliRunner()
    warned = "warning: bubblewrap is not usable here"
    for usable in (False, True):
        monkeypatch.setattr(bubblewrap, "bwrap_usable", lambda usable=usable: usable)
        built = runner.invoke(app, ["build", "--out", str(tmp_path / f"b{usable}")])
        reverified = runner.invoke(app, ["reverify", str(tmp_path)])
        assert built.exit_code == reverified.exit_code == 0, (built.output, reverified.output)
        assert (warned in built.output, warned in reverified.output) == (not usable, not usable)
    monkeypatch.setattr(bubblewrap, "bwrap_usable", lambda: False)
    report_only = runner.invoke(app, ["reverify", str(tmp_path), "--report-only"])  # runs no candidate
    assert report_only.exit_code == 0 and warned not in report_only.output


def test_the_workers_asked_for_on_the_command_line_reach_the_engines_options(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from builder.cli import app
    from builder.pipeline import reverify_run

    asked: dict[str, object] = {}  # the commands stop once they have handed their parameters on
    monkeypatch.setattr(build_module, "run_build", lambda params, show_progress: asked.setdefault("build", params))
    monkeypatch.setattr(reverify_run, "run_reverify", lambda params: asked.setdefault("reverify", params))
    runner = CliRunner()
    runner.invoke(app, ["build", "--out", str(tmp_path / "b"), "--eval-workers", "3", "--compile-workers", "2"])
    runner.invoke(app, ["reverify", str(tmp_path), "--eval-workers", "5"])
    assert (asked["build"].eval_workers, asked["build"].compile_workers) == (3, 2)
    assert asked["reverify"].eval_workers == 5
    assert runner.invoke(app, ["build", "--out", str(tmp_path / "c"), "--eval-workers", "0"]).exit_code == 2
    # ... and from the build's parameters to the options its verifier is made with
    made: list = []
    monkeypatch.setattr(Orchestrator, "_make_generator", lambda self, store: TwoRoundGenerator())
    params = BuildParams(out=tmp_path / "d", backend="cpu", tasks="^1/1$", eval_workers=3)
    Orchestrator(params, show_progress=False, make_verifier=lambda o, s: made.append(o) or FakeVerifier(o)).run()
    assert made and {options.eval_workers for options in made} == {3}
