"""A stream over several GPUs runs an engine process per GPU (builder/verify/engine/device_engines.py): pairs are handed
out by task, every pair comes back as exactly one record (a crash record when its engine died), and closing the
stream leaves no engine behind. The engines are real processes running the real engine on the CPU backend
(`VerifyOptions(engines=2)`), where each engine stands for one GPU."""

from __future__ import annotations

import json
import logging
import os
import signal
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from builder import config
from builder.cli.candidate_args import resolve_candidate
from builder.verify import environment
from builder.verify.engine import device_engines
from builder.verify.engine.infrastructure import InfrastructureFailure
from builder.verify.engine.verifier import Verifier, VerifyOptions
from builder.verify.protocol.entry_points import ENGINE_PROCESS_MODULE

FIXTURES = config.REPO_ROOT / "tests" / "fixtures"
SUITE = FIXTURES / "tasks"
PYTHON = FIXTURES / "candidates" / "python"


def test_cores_and_compile_workers_are_shared_out():
    shares = device_engines.engine_shares(["0", "1"], list(range(16)), compile_workers=8)
    assert [s["cores"] for s in shares] == [list(range(8)), list(range(8, 16))]
    assert [s["compile_workers"] for s in shares] == [4, 4]
    assert device_engines.engine_shares([None], [0], 1)[0] == {"device": None, "cores": [0], "compile_workers": 1}


def test_compile_workers_follow_the_gpus_unless_given():
    # Several GPUs: compile sets the pace, three quarters of the cores build; one GPU, or CPU engines: half.
    assert VerifyOptions(backend="cuda").with_workers_for(64, gpus=4).compile_workers == 48
    assert VerifyOptions(backend="cuda").with_workers_for(64, gpus=1).compile_workers == 32
    assert VerifyOptions(backend="cpu").with_workers_for(64, gpus=0).compile_workers == 32
    assert VerifyOptions(backend="cuda", compile_workers=5).with_workers_for(64, gpus=2).compile_workers == 5
    assert config.compile_workers_for(1, gpus=4) == 1


def test_evaluation_workers_follow_the_cores_and_gpus_unless_given():
    # One large GPU with cores to spare: more children overlap their waits. Several GPUs keep the cores for
    # compile; a smaller or unknown GPU keeps its memory for the kernels' tensors.
    def workers(cores, gpus, gib, **given):
        return VerifyOptions(**given).with_workers_for(cores, gpus, gib).workers_per_device()

    assert workers(16, 1, 141.0, backend="cuda") == 12
    assert workers(15, 1, 141.0, backend="cuda") == 8
    assert workers(16, 1, 48.0, backend="cuda") == 8
    assert workers(16, 1, None, backend="cuda") == 8
    assert workers(64, 4, 141.0, backend="cuda") == 8
    assert workers(64, 0, None, backend="cpu") == 1
    assert workers(16, 1, 141.0, backend="cuda", eval_workers=3) == 3
    # Fixed once: an engine process given the stream's options keeps them whatever its own share of the machine.
    fixed = VerifyOptions(backend="cuda").with_workers_for(64, 4, 141.0)
    assert fixed.with_workers_for(16, 1, 141.0).workers_per_device() == 8


def test_urgent_first_builds_follow_the_gpus_unless_given():
    # One GPU: only the first build is urgent. Several: the ramp's first four, whose records the engines wait for.
    def urgent(cores, gpus, **given):
        return VerifyOptions(**given).with_workers_for(cores, gpus, 141.0).urgent_builds

    assert urgent(16, 1, backend="cuda") == 1
    assert urgent(32, 2, backend="cuda") == urgent(64, 4, backend="cuda") == 4
    assert urgent(64, 0, backend="cpu") == 1
    assert urgent(32, 2, backend="cuda", urgent_builds=0) == 0
    # Fixed once: an engine process of a two-GPU stream keeps the stream's rule on its one GPU.
    fixed = VerifyOptions(backend="cuda").with_workers_for(32, 2, 141.0)
    assert fixed.with_workers_for(16, 1, 141.0).urgent_builds == 4


@pytest.mark.parametrize("engines", [None, 1])
def test_a_stream_over_four_gpus_gets_the_several_gpu_share_in_engines_or_in_one_process(monkeypatch, engines):
    """One rule wherever the stream runs: an engine per GPU, or the whole stream in this process (engines=1)."""
    from builder.verify.engine import verifier as verifier_module

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(environment, "visible_gpu_ids", lambda: ["0", "1", "2", "3"])
    monkeypatch.setattr(environment, "gpu_count", lambda: 4)
    monkeypatch.setattr(verifier_module, "keep_timing_cores", lambda *args, **kwargs: {})
    verifier = Verifier(VerifyOptions(backend="cuda", engines=engines))
    assert len(verifier.engine_devices) == (4 if engines is None else 0)
    assert verifier.options.compile_workers == 48
    cpu = Verifier(VerifyOptions(backend="cpu", engines=2))
    assert cpu.options.compile_workers == 32


@pytest.mark.parametrize(("visible", "setting", "engines", "expected"), [
    (["0", "1"], True, None, ["0", "1"]), (["3"], True, None, []), (["0", "1"], False, None, []),
    (["0", "1"], True, 1, []), (["0", "1"], False, 2, ["0", "1"]),
])  # fmt: skip
def test_a_cuda_stream_runs_an_engine_per_visible_gpu(monkeypatch, visible, setting, engines, expected):
    monkeypatch.setattr(environment, "visible_gpu_ids", lambda: visible)
    monkeypatch.setattr(config, "ENGINE_PROCESS_PER_GPU", setting)
    monkeypatch.setattr("builder.verify.engine.device_gate.keep_timing_cores", lambda *a: {})
    assert Verifier(VerifyOptions(backend="cuda", engines=engines)).engine_devices == expected


def fixture_pairs(names: list[str]) -> list:
    pairs = []
    for index, name in enumerate(names):
        candidate, task, _ = resolve_candidate(PYTHON / name, "1/1", SUITE, "cpu")
        pairs.append((replace(candidate, source=candidate.source + f"\n# copy {index}\n",
                              kernel_name=f"{Path(name).stem}-{index}"), task))  # fmt: skip
    return pairs


def engine_processes() -> list[psutil.Process]:
    found = []
    for process in psutil.Process().children():
        try:
            if ENGINE_PROCESS_MODULE in " ".join(process.cmdline()):
                found.append(process)
        except psutil.Error:  # it ended (or is a zombie) as it was looked at
            continue
    return found


def assert_no_engine_left(timeout_s: float = 60.0) -> None:
    """Every engine process exits: one that said it is done on its own, shortly after the stream's end (which does
    not wait for it), and every other one before the stream ends."""
    gone, alive = psutil.wait_procs(engine_processes(), timeout=timeout_s)
    assert not alive, [process.pid for process in alive]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_engines_give_every_pair_the_verdict_one_process_gives(tmp_path, caplog):
    names = ["correct_uses_torch_ops.py", "incorrect_wrong_result.py", "incorrect_returns_constant.py"] * 2
    pairs = fixture_pairs(names)
    options = VerifyOptions(backend="cpu", build_cache_dir=tmp_path / "builds", baseline_cache_dir=tmp_path / "b")
    alone = {r.kernel_name: r.status for r in Verifier(options).stream(pairs)}
    caplog.set_level(logging.INFO, logger=device_engines.__name__)
    caplog.set_level(logging.DEBUG, logger="builder.verify.engine.verifier")  # the engines log each evaluation's phases
    # Baselines of their own: the first run's cached ones would leave the engines none to measure.
    options = replace(options, engines=2, batch_size=2, baseline_cache_dir=tmp_path / "engines' baselines")
    engines = {r.kernel_name: r.status for r in Verifier(options).stream(pairs)}
    assert engines == alone and len(alone) == len(pairs)
    assert Counter(alone.values()) == {"correct": 2, "incorrect": 4}
    ends = [r.getMessage() for r in caplog.records if r.name == device_engines.__name__]
    assert len(ends) == 2 and all("0 pending" in line for line in ends), ends
    assert not any(": 0 records" in line for line in ends), ends  # the pairs were shared out
    phases = {r.getMessage().split(":")[0].removeprefix("evaluation phases of "): r.processName for r in caplog.records
              if r.name == "builder.verify.engine.verifier" and r.getMessage().startswith("evaluation phases of ")}  # fmt: skip
    assert set(phases) == set(engines) and set(phases.values()) == {"engine-0", "engine-1"}, phases
    # each engine's totals at its stream's end (the bench's view of its device, references and start)
    totals = {r.processName: json.loads(r.getMessage().removeprefix("engine totals: ")) for r in caplog.records
              if r.getMessage().startswith("engine totals: ")}  # fmt: skip
    assert set(totals) == {"engine-0", "engine-1"} and sum(t["records"] for t in totals.values()) == len(pairs)
    for engine in totals.values():
        assert engine["references"] == len(engine["reference_ready_at"]) == 1  # one task: one clean reference
        assert engine["started_at"] < engine["reference_ready_at"][0] < time.monotonic()
        assert engine["reference_s"] > 0 and {"owned_s", "owner_wait_s", "unheld_s"} <= set(engine["gate"])
        marks = engine["milestones"]  # its start, step by step, on the same clock
        assert (engine["started_at"] <= marks["start_received"] <= marks["verifier_ready"] <= marks["stream_started"]
                <= marks["first_pair_asked"] <= marks["first_pair_received"] <= marks["first_window_received"]
                <= marks["first_build_taken"] <= marks["first_evaluation_returned"] <= marks["first_record"]
                < time.monotonic())  # fmt: skip
        assert marks["first_reference_ready"] <= marks["first_evaluation_returned"] and "torch_imported" in marks
        assert marks["first_record"] <= engine["last_record_at"] < time.monotonic()
    # the correct kernels' baselines: measured by whichever engine evaluated one
    assert any("first_baseline_child_ended" in engine["milestones"] for engine in totals.values())
    assert_no_engine_left()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_stream_ends_when_its_engines_say_done_not_when_their_processes_exit(tmp_path, monkeypatch):
    # Engines that linger 20 s in their exit (an interpreter's teardown, slow on a GPU box): the builder has every
    # record and goes on, and the engines still exit on their own.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import atexit, os, time\natexit.register(time.sleep, float(os.environ.get('KA_TEST_ENGINE_EXIT_S', 0)))\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("KA_TEST_ENGINE_EXIT_S", "20")
    pairs = fixture_pairs(["correct_uses_torch_ops.py", "incorrect_wrong_result.py"] * 2)
    options = VerifyOptions(backend="cpu", engines=2, batch_size=1, build_cache_dir=tmp_path / "builds",
                            baseline_cache_dir=tmp_path / "baselines")  # fmt: skip
    records = list(Verifier(options).stream(pairs))
    ended = time.monotonic()
    assert Counter(r.status for r in records) == {"correct": 2, "incorrect": 2}
    lingering = engine_processes()  # (an engine told the end early may have exited while the other worked)
    assert lingering  # the last to say done is still in its exit: the stream did not wait for it
    gone, alive = psutil.wait_procs(lingering, timeout=90)
    assert not alive and time.monotonic() - ended > 10  # it exited after its 20 s, on its own


def assert_each_pair_once_the_killed_engines_as_crashes(records: list, pairs: list, statuses: set[str]) -> None:
    """Every pair came back exactly once; the SIGKILLed engine's pending pairs as failures of the machinery (no
    record: the build tries them again), and so are pairs handed back for it that no engine was left to take; no
    engine left."""
    names_back = Counter(r.kernel_name for r in records)
    assert sorted(names_back) == sorted(c.kernel_name for c, _ in pairs) and set(names_back.values()) == {1}
    lost = [r for r in records if isinstance(r, InfrastructureFailure)]
    assert any("engine process" in r.reason and "exit -9" in r.reason for r in lost)
    assert all("exit -9" in r.reason or "no engine was left" in r.reason for r in lost)
    assert {r.status for r in records if r not in lost} <= set(statuses)
    assert_no_engine_left()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_engine_killed_mid_stream_loses_no_pair_and_repeats_none(tmp_path):
    names = ["timeout_infinite_loop.py", "correct_uses_torch_ops.py"] * 3
    pairs = fixture_pairs(names)
    options = VerifyOptions(backend="cpu", engines=2, batch_size=2, timeout_s=8, build_cache_dir=tmp_path / "builds",
                            baseline_cache_dir=tmp_path / "baselines")  # fmt: skip
    records, killed = [], None
    stream = Verifier(options).stream(pairs)
    for record in stream:
        records.append(record)
        if killed is None:
            busy = engine_processes()
            assert busy
            killed = max(busy, key=lambda engine: len(engine.children(recursive=True)))  # one still at work
            killed.send_signal(signal.SIGKILL)
    assert_each_pair_once_the_killed_engines_as_crashes(records, pairs, {"timeout", "correct"})


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_closing_the_stream_stops_every_engine_and_its_children(tmp_path, caplog):
    pairs = fixture_pairs(["incorrect_wrong_result.py", "timeout_infinite_loop.py"] * 3)  # a quick record first
    options = VerifyOptions(backend="cpu", engines=2, timeout_s=120, build_cache_dir=tmp_path / "builds",
                            baseline_cache_dir=tmp_path / "baselines")  # fmt: skip
    caplog.set_level(logging.DEBUG, logger="builder.verify.engine.verifier")  # as the bench listens for engines' totals
    stream = Verifier(options).stream(pairs)
    next(stream)
    engines = engine_processes()
    descendants = [child for engine in engines for child in engine.children(recursive=True)]
    began = time.monotonic()
    stream.close()
    assert time.monotonic() - began < config.ENGINE_STOP_GRACE_S
    gone, alive = psutil.wait_procs(engines + descendants, timeout=10)
    assert not alive, [p.info if hasattr(p, "info") else p.pid for p in alive]
    # a stopped engine still reports its figures so far (a bench cut short shows each engine's device and start)
    totals = {r.processName: json.loads(r.getMessage().removeprefix("engine totals: ")) for r in caplog.records
              if r.getMessage().startswith("engine totals: ")}  # fmt: skip
    assert set(totals) == {"engine-0", "engine-1"}, totals
    assert all(engine["stopped"] and "first_window_received" in engine["milestones"] for engine in totals.values())


def slow_and_quick_tasks(tmp_path) -> tuple[list, list, VerifyOptions]:
    """Pairs of a task that times out on every pair and of one judged in a few seconds, interleaved (each engine
    keeps one task), and two CPU engines for them.

    A window of 8 pairs per engine puts the whole input in the router's reach at once, so each engine takes its
    own task's 8 pairs at the start and the quick engine runs out while the slow one holds pairs it has not begun.
    With windows of 2 the quick engine took the slow task's last pairs from the router instead, about one run in
    three on two cores, and nothing was left to hand back."""
    slow = fixture_pairs(["timeout_infinite_loop.py"] * 8)
    quick = []
    for index, (candidate, _) in enumerate(fixture_pairs(["incorrect_wrong_result.py"] * 8)):
        other, task, _ = resolve_candidate(PYTHON / "incorrect_wrong_result.py", "1/2", SUITE, "cpu")
        quick.append((replace(other, source=candidate.source, kernel_name=f"quick-{index}"), task))
    # 8 s: a quick pair takes 3-4 s on a loaded 2-core box (its child's start-up included) and must not time out;
    # the slow task's 8 pairs then take over a minute, well after the quick engine has run out.
    options = VerifyOptions(backend="cpu", engines=2, batch_size=8, compile_workers=2, timeout_s=8,
                            build_cache_dir=tmp_path / "builds", baseline_cache_dir=tmp_path / "baselines")  # fmt: skip
    return slow, quick, options


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_engine_out_of_pairs_takes_over_pairs_the_other_has_not_begun(tmp_path, caplog, monkeypatch):
    # At the end the quick engine takes over what the slow one has not begun, and every pair still comes back
    # exactly once.
    monkeypatch.setattr(config, "ENGINE_HAND_BACK_MIN_PAIRS", 1)  # the builder's decision: taken on a CPU's scale
    slow, quick, options = slow_and_quick_tasks(tmp_path)
    pairs = [pair for both in zip(slow, quick, strict=True) for pair in both]
    shared_before = set(Path(tempfile.gettempdir()).glob(f"{config.REFERENCE_SHARE_PREFIX}*"))
    caplog.set_level(logging.DEBUG, logger=device_engines.__name__)
    caplog.set_level(logging.DEBUG, logger="builder.verify.engine.verifier")
    records = list(Verifier(options).stream(pairs))
    assert sorted(r.kernel_name for r in records) == sorted(c.kernel_name for c, _ in pairs)
    # (the quick ones: the scale-shift kernel raises on the matmul task's inputs)
    assert {r.kernel_name: r.status for r in records} == {
        **{c.kernel_name: "timeout" for c, _ in slow}, **{c.kernel_name: "runtime_error" for c, _ in quick}}  # fmt: skip
    handed = [r.getMessage() for r in caplog.records if " handed back " in r.getMessage()]
    assert handed, "no pair was handed back"
    giver = int(handed[0].split()[1])
    totals = {r.processName: json.loads(r.getMessage().removeprefix("engine totals: ")) for r in caplog.records
              if r.getMessage().startswith("engine totals: ")}  # fmt: skip
    moved = sum(int(line.split()[4]) for line in handed)
    taker = totals[f"engine-{1 - giver}"]
    assert taker["records"] > len(quick) - moved  # the taker evaluated some of the slow task
    # the slow task's clean reference came with its pairs: the taker computed only its own task's
    assert (taker["references"], taker["references_adopted"]) == (1, 1)
    assert (totals[f"engine-{giver}"]["references"], totals[f"engine-{giver}"]["references_adopted"]) == (1, 0)
    assert not set(Path(tempfile.gettempdir()).glob(f"{config.REFERENCE_SHARE_PREFIX}*")) - shared_before
    assert sum(t["records"] for t in totals.values()) == len(pairs)
    assert_no_engine_left()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_pairs_handed_back_are_judged_from_the_givers_reference_as_the_giver_would(tmp_path, caplog, monkeypatch):
    # The slow task's last pairs are correct kernels: a hand-back takes the last queued first, so the taker judges
    # them from the reference the giver shared. A reference the taker could not read fails them.
    monkeypatch.setattr(config, "ENGINE_HAND_BACK_MIN_PAIRS", 1)
    slow, quick, options = slow_and_quick_tasks(tmp_path)
    options = replace(options, timeout_s=20)  # room for a correct kernel's checks and timing on a loaded CPU
    correct = fixture_pairs(["correct_uses_torch_ops.py"] * 2)
    slow = slow[:2] + [(replace(c, kernel_name=f"correct-{i}"), t) for i, (c, t) in enumerate(correct)]
    pairs = [pair for both in zip(slow, quick[:4], strict=True) for pair in both]
    caplog.set_level(logging.DEBUG, logger=device_engines.__name__)
    caplog.set_level(logging.DEBUG, logger="builder.verify.engine.verifier")
    records = {r.kernel_name: r for r in Verifier(options).stream(pairs)}
    assert sorted(records) == sorted(c.kernel_name for c, _ in pairs)
    assert [records[f"correct-{i}"].status for i in range(2)] == ["correct", "correct"], [
        records[f"correct-{i}"].error for i in range(2)]  # fmt: skip
    handed = [r.getMessage() for r in caplog.records if " handed back " in r.getMessage()]
    assert handed, "no pair was handed back"
    giver = int(handed[0].split()[1])
    totals = {r.processName: json.loads(r.getMessage().removeprefix("engine totals: ")) for r in caplog.records
              if r.getMessage().startswith("engine totals: ")}  # fmt: skip
    assert totals[f"engine-{1 - giver}"]["references_adopted"] == 1
    for engine in totals.values():  # each computed its own task's reference: begun, then ready
        assert engine["milestones"]["first_reference_started"] <= engine["milestones"]["first_reference_ready"]
    assert_no_engine_left()


class KillOnHandBack(logging.Handler):
    """At the first hand-back the builder logs, SIGKILL the engine with the most children (one still at work)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.killed: psutil.Process | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.killed is None and " handed back " in record.getMessage():
            self.killed = max(engine_processes(), key=lambda engine: len(engine.children(recursive=True)))
            self.killed.send_signal(signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_engine_killed_as_pairs_are_handed_back_loses_none_and_repeats_none(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "ENGINE_HAND_BACK_MIN_PAIRS", 1)
    slow, quick, options = slow_and_quick_tasks(tmp_path)
    pairs = [pair for both in zip(slow, quick, strict=True) for pair in both]
    killer = KillOnHandBack()
    routing_log = logging.getLogger(device_engines.__name__)
    routing_log.addHandler(killer)
    monkeypatch.setattr(routing_log, "level", logging.DEBUG)
    try:
        records = list(Verifier(options).stream(pairs))
    finally:
        routing_log.removeHandler(killer)
    assert killer.killed is not None, "no pair was handed back"
    assert_each_pair_once_the_killed_engines_as_crashes(records, pairs, {"timeout", "runtime_error"})


@pytest.mark.parametrize(("cores", "gib", "expected"), [(16, 141.0, 12), (16, None, 8), (8, 141.0, 8)])
def test_a_one_gpu_stream_takes_its_evaluation_workers_from_its_cores_and_its_gpus_memory(
    monkeypatch, cores, gib, expected
):
    from builder.verify.engine import verifier as verifier_module

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(environment, "visible_gpu_ids", lambda: ["0"])
    monkeypatch.setattr(environment, "gpu_count", lambda: 1)
    monkeypatch.setattr(environment, "gpu_memory_gib", lambda index=0: gib)
    monkeypatch.setattr(verifier_module, "keep_timing_cores", lambda *args, **kwargs: {})
    assert Verifier(VerifyOptions(backend="cuda")).options.workers_per_device() == expected
    assert Verifier(VerifyOptions(backend="cuda", eval_workers=2)).options.workers_per_device() == 2
