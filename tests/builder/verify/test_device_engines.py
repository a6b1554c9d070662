"""A stream over several GPUs runs an engine process per GPU (builder/verify/device_engines.py): pairs are handed
out by task, every pair comes back as exactly one record (a crash record when its engine died), and closing the
stream leaves no engine behind. The engines are real processes running the real engine on the CPU backend
(`VerifyOptions(engines=2)`), where each engine stands for one GPU."""

from __future__ import annotations

import json
import logging
import signal
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from builder import config
from builder.cli.candidate_args import resolve_candidate
from builder.verify import device_engines, environment
from builder.verify.engine import Verifier, VerifyOptions

FIXTURES = config.REPO_ROOT / "tests" / "fixtures"
SUITE = FIXTURES / "tasks"
PYTHON = FIXTURES / "candidates" / "python"


class FakeTask:
    def __init__(self, task_id: str) -> None:
        self.id = task_id


def pairs_of(*task_ids: str) -> list[tuple[str, FakeTask]]:
    return [(f"p{index}", FakeTask(task_id)) for index, task_id in enumerate(task_ids)]


def test_an_engine_takes_its_own_and_new_tasks_in_the_inputs_order():
    # Interleaved input: each engine goes through its tasks side by side, not one task's pairs first.
    router = device_engines.Router(pairs_of("a", "b", "c", "d", "a", "b", "c", "d"), lookahead=8)
    assert [router.next_for(0)[0], router.next_for(1)[0]] == ["p0", "p1"]  # a -> 0, b -> 1
    assert router.next_for(0)[0] == "p2"  # c, nobody's yet, comes before a's next pair (p4)
    assert router.next_for(0)[0] == "p3"  # and d
    assert router.next_for(0)[0] == "p4"  # then a, its own, skipping nothing of its own
    assert router.next_for(1)[0] == "p5"  # b is engine 1's; c and d (engine 0's) are passed over
    assert [router.next_for(0)[0], router.next_for(0)[0]] == ["p6", "p7"]
    assert router.next_for(1) is None


def test_two_engines_split_the_tasks_evenly_whoever_asks_first():
    router = device_engines.Router(pairs_of("a", "b", "c", "d", "a", "b", "c", "d"), lookahead=8, engines=2)
    assert [router.next_for(0)[0], router.next_for(0)[0]] == ["p0", "p4"]  # a task ahead of engine 1: its own
    assert [router.next_for(1)[0], router.next_for(1)[0]] == ["p1", "p2"]  # b, then c (level, it may claim)
    assert router.next_for(0)[0] == "p3"  # d: one task behind, engine 0 claims again
    assert [router.next_for(1)[0], router.next_for(1)[0], router.next_for(0)[0]] == ["p5", "p6", "p7"]


def test_an_engine_out_of_its_own_pairs_shares_one_task_before_another():
    router = device_engines.Router(pairs_of("a", "b", "c", "b", "c", "b"), lookahead=6, engines=2)
    assert [router.next_for(0)[0], router.next_for(1)[0], router.next_for(1)[0]] == ["p0", "p1", "p2"]
    assert router.next_for(0)[0] == "p3"  # nothing of its own or nobody's: engine 1's b, the first waiting
    assert router.next_for(0)[0] == "p5"  # b again, past c: one more clean reference, not two


def engine_state(pending: int, asking: bool = False, asked_s_ago: float = 0.0, told_end: bool = False,
                 has_asked: bool = True):  # fmt: skip
    return SimpleNamespace(pending=[None] * pending, ended=False, told_end=told_end, asking=asking,
                           asked_at=100.0 - asked_s_ago, has_asked=has_asked)  # fmt: skip


def test_the_last_pairs_go_to_the_least_loaded_engine_that_wants_them():
    busy, other = engine_state(20), engine_state(10, asking=True)
    assert device_engines.balanced(busy, [busy, other], last_pairs=False, slack=16, now=100.0)  # a build's slack
    assert not device_engines.balanced(busy, [busy, other], last_pairs=True, slack=16, now=100.0)  # none at the end
    other.asking = False  # between two of its requests: still reading its window, so still held back for
    assert not device_engines.balanced(busy, [busy, other], last_pairs=True, slack=16, now=100.0)
    other.asked_at -= config.ENGINE_READING_S + 0.1  # its window read, it waits for room: nobody waits for it
    assert device_engines.balanced(busy, [busy, other], last_pairs=True, slack=16, now=100.0)
    starting = engine_state(0, asked_s_ago=config.ENGINE_READING_S + 1, has_asked=False)  # spawned, not yet asking
    assert not device_engines.balanced(busy, [busy, starting], last_pairs=True, slack=16, now=100.0)  # no runaway
    level = engine_state(10)
    assert device_engines.balanced(level, [level, engine_state(10, asking=True)], last_pairs=True, slack=16, now=100.0)


def test_an_engine_silent_too_long_or_told_the_end_holds_nobody_back():
    engine = engine_state(40)
    silent = engine_state(0, asked_s_ago=config.ENGINE_BALANCE_WAIT_S + 1)
    assert device_engines.balanced(engine, [engine, silent], last_pairs=False, slack=16, now=100.0)
    assert device_engines.balanced(engine, [engine, engine_state(0, told_end=True)], False, 16, now=100.0)
    assert not device_engines.balanced(engine, [engine, engine_state(0, asked_s_ago=1.0)], False, 16, now=100.0)


def test_an_engine_keeps_its_tasks_and_takes_new_ones_before_others():
    router = device_engines.Router(pairs_of("a", "b", "a", "b", "c"), lookahead=5)
    assert router.next_for(0)[0] == "p0"  # a -> engine 0
    assert router.next_for(1)[0] == "p1"  # a is engine 0's: b, nobody's yet -> engine 1
    assert router.next_for(1)[0] == "p3"  # engine 1 keeps b
    assert router.next_for(1)[0] == "p4"  # then a new task (c)
    assert router.next_for(1)[0] == "p2"  # then, rather than idle, engine 0's
    assert router.next_for(0) is None


def test_a_pair_given_back_goes_out_first_and_leaves_the_stream_unfinished():
    router = device_engines.Router(pairs_of("a", "a"), lookahead=1)
    first = router.next_for(0)
    router.give_back(first)
    assert router.next_for(1) is first
    router.give_back(first)
    assert router.unfinished()
    assert [router.next_for(0)[0], router.next_for(0)[0], router.next_for(0)] == ["p0", "p1", None]
    assert not router.unfinished()


def test_the_router_reads_its_input_only_as_far_as_it_looks_ahead():
    read = []

    def source():
        for pair in pairs_of("a", "b", "c", "d"):
            read.append(pair[0])
            yield pair

    router = device_engines.Router(source(), lookahead=2)
    router.next_for(0)
    assert read == ["p0", "p1"]


def test_an_engine_ahead_of_the_least_loaded_by_more_than_a_build_waits():
    assert device_engines.within_reach(18, [2, 40], slack=16)
    assert not device_engines.within_reach(19, [2, 40], slack=16)  # the first engine up would take it all
    assert device_engines.within_reach(500, [], slack=16)  # the only one still asking


def test_cores_and_compile_workers_are_shared_out():
    shares = device_engines.engine_shares(["0", "1"], list(range(16)), compile_workers=8)
    assert [s["cores"] for s in shares] == [list(range(8)), list(range(8, 16))]
    assert [s["compile_workers"] for s in shares] == [4, 4]
    assert device_engines.engine_shares([None], [0], 1)[0] == {"device": None, "cores": [0], "compile_workers": 1}


@pytest.mark.parametrize(("visible", "setting", "engines", "expected"), [
    (["0", "1"], True, None, ["0", "1"]), (["3"], True, None, []), (["0", "1"], False, None, []),
    (["0", "1"], True, 1, []), (["0", "1"], False, 2, ["0", "1"]),
])  # fmt: skip
def test_a_cuda_stream_runs_an_engine_per_visible_gpu(monkeypatch, visible, setting, engines, expected):
    monkeypatch.setattr(environment, "visible_gpu_ids", lambda: visible)
    monkeypatch.setattr(config, "ENGINE_PROCESS_PER_GPU", setting)
    monkeypatch.setattr("builder.verify.device_gate.keep_timing_cores", lambda *a: {})
    assert Verifier(VerifyOptions(backend="cuda", engines=engines)).engine_devices == expected


def fixture_pairs(names: list[str]) -> list:
    pairs = []
    for index, name in enumerate(names):
        candidate, task, _ = resolve_candidate(PYTHON / name, "1/1", SUITE, "cpu")
        pairs.append((replace(candidate, source=candidate.source + f"\n# copy {index}\n",
                              kernel_name=f"{Path(name).stem}-{index}"), task))  # fmt: skip
    return pairs


def engine_processes() -> list[psutil.Process]:
    return [p for p in psutil.Process().children() if device_engines.MODULE in " ".join(p.cmdline())]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_engines_give_every_pair_the_verdict_one_process_gives(tmp_path, caplog):
    names = ["correct_uses_torch_ops.py", "incorrect_wrong_result.py", "incorrect_returns_constant.py"] * 2
    pairs = fixture_pairs(names)
    options = VerifyOptions(backend="cpu", build_cache_dir=tmp_path / "builds", baseline_cache_dir=tmp_path / "b")
    alone = {r.kernel_name: r.status for r in Verifier(options).stream(pairs)}
    caplog.set_level(logging.INFO, logger=device_engines.__name__)
    caplog.set_level(logging.DEBUG, logger="builder.verify.engine")  # the engines log each evaluation's phases
    # Baselines of their own: the first run's cached ones would leave the engines none to measure.
    options = replace(options, engines=2, batch_size=2, baseline_cache_dir=tmp_path / "engines' baselines")
    engines = {r.kernel_name: r.status for r in Verifier(options).stream(pairs)}
    assert engines == alone and len(alone) == len(pairs)
    assert Counter(alone.values()) == {"correct": 2, "incorrect": 4}
    ends = [r.getMessage() for r in caplog.records if r.name == device_engines.__name__]
    assert len(ends) == 2 and all("0 pending" in line for line in ends), ends
    assert not any(": 0 records" in line for line in ends), ends  # the pairs were shared out
    phases = {r.getMessage().split(":")[0].removeprefix("evaluation phases of "): r.processName for r in caplog.records
              if r.name == "builder.verify.engine" and r.getMessage().startswith("evaluation phases of ")}  # fmt: skip
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
                <= marks["first_window_received"] <= marks["first_build_taken"] <= marks["first_evaluation_returned"]
                <= marks["first_record"] < time.monotonic())  # fmt: skip
        assert marks["first_reference_ready"] <= marks["first_evaluation_returned"] and "torch_imported" in marks
        assert marks["first_record"] <= engine["last_record_at"] < time.monotonic()
    # the correct kernels' baselines: measured by whichever engine evaluated one
    assert any("first_baseline_child_ended" in engine["milestones"] for engine in totals.values())
    assert not engine_processes()


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
    names_back = Counter(r.kernel_name for r in records)
    assert sorted(names_back) == sorted(c.kernel_name for c, _ in pairs) and set(names_back.values()) == {1}
    crashed = [r for r in records if r.status == "crash"]
    assert crashed and all("engine process" in r.error and "exit -9" in r.error for r in crashed)
    assert {r.status for r in records} <= {"crash", "timeout", "correct"}
    assert not engine_processes()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_closing_the_stream_stops_every_engine_and_its_children(tmp_path, caplog):
    pairs = fixture_pairs(["incorrect_wrong_result.py", "timeout_infinite_loop.py"] * 3)  # a quick record first
    options = VerifyOptions(backend="cpu", engines=2, timeout_s=120, build_cache_dir=tmp_path / "builds",
                            baseline_cache_dir=tmp_path / "baselines")  # fmt: skip
    caplog.set_level(logging.DEBUG, logger="builder.verify.engine")  # as the bench listens for engines' totals
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
