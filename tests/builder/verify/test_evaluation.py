"""Several evaluations on one device: checks side by side, each timing window alone (the trusted fake child of
tests/fixtures/sandbox/fake_child.py keeps to the real child's device hand-shake and logs when it ran what)."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from itertools import combinations
from pathlib import Path

import pytest

from builder.tasks import load_suite
from builder.verify.compile.extension import CompileResult
from builder.verify.engine.children import build_job
from builder.verify.engine.clean_reference import ReferenceCache
from builder.verify.engine.device_gate import device_gate
from builder.verify.engine.evaluation import run_judged
from builder.verify.engine.verifier import Verifier, VerifyOptions
from tests.builder.verify.test_engine import FAKE_CHILD, candidate, fake_children


@pytest.fixture(scope="module")
def task():
    return load_suite().get("1/1")


@pytest.fixture
def options(tmp_path):
    return VerifyOptions(backend="cpu", timeout_s=60, child_module=FAKE_CHILD, trials=3,
                         baseline_cache_dir=tmp_path / "baselines", build_cache_dir=tmp_path / "builds").with_seeds()  # fmt: skip


def judged(task, options, reference, directive, name):
    scratch = Path(tempfile.mkdtemp(prefix="ka-eval-"))
    try:
        job = build_job(task, candidate(task, directive, name), CompileResult(ok=True), options, "evaluate", scratch)
        result, outcome = run_judged(job, scratch, options, reference)
        assert result is not None, outcome.stderr_tail
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def overlaps(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def race(task, options, reference, first: dict, second: dict) -> tuple[dict, dict]:
    """Two candidates evaluated at once on the device's gate; their gate logs."""
    with ThreadPoolExecutor(2) as pool:
        one = pool.submit(judged, task, options, reference, first, "first")
        two = pool.submit(judged, task, options, reference, second, "second")
        return one.result()["gate_log"], two.result()["gate_log"]


def test_checks_run_side_by_side_and_no_window_shares_the_device(task, options):
    reference = ReferenceCache().get(task, options)
    directives = [{"checks_s": 1.5, "window_s": 0.4}] * 3 + [{"checks_s": 1.5, "wrong_output": True}]
    stats = device_gate("cpu").stats
    owned_before = stats.owned_count
    with ThreadPoolExecutor(len(directives)) as pool:
        futures = [pool.submit(judged, task, options, reference, d, f"k{i}") for i, d in enumerate(directives)]
        results = [f.result() for f in futures]
    logs = [r["gate_log"] for r in results]
    assert [r["status"] for r in results] == ["correct"] * 3 + ["incorrect"]
    assert "window" not in logs[3]  # the incorrect one was never timed
    windows = [log["window"] for log in logs if "window" in log]
    assert len(windows) == 3
    for window in windows:  # a window shares the device with no running check and no other window
        assert not any(overlaps(window, span) for log in logs for span in log["check_segments"])
        assert sum(overlaps(window, other) for other in windows) == 1  # itself
    assert stats.owned_count - owned_before == 3
    assert any(overlaps(a["checks"], b["checks"]) for a, b in combinations(logs, 2))  # checks did run together


def test_long_checks_yield_between_trials_to_a_waiting_window_and_a_child_that_does_not_is_waited_for(task,
                                                                                                         options):  # fmt: skip
    options = replace(options, trials=6)
    reference = ReferenceCache().get(task, options)
    stats = device_gate("cpu").stats
    yields_before = stats.yields

    quick_one = {"checks_s": 1.5, "window_s": 0.3}
    slow, quick = race(task, options, reference, {"checks_s": 6.0, "wrong_output": True}, quick_one)
    window = quick["window"]
    assert window[1] < slow["checks"][1] - 1.0  # timed while the long checks were yielded, not after them
    assert len(slow["check_segments"]) >= 2
    assert not any(overlaps(window, span) for span in slow["check_segments"])
    assert stats.yields > yields_before

    slow, quick = race(task, options, reference, {"checks_s": 3.0, "wrong_output": True, "yields": False}, quick_one)
    assert len(slow["check_segments"]) == 1
    assert not overlaps(quick["window"], slow["check_segments"][0])  # waited for checks that would not yield


@pytest.mark.parametrize("answers_the_end", [True, False], ids=["answers", "silent"])
def test_a_window_ends_with_its_last_half_block_not_when_the_child_exits(task, options, answers_the_end):
    """The device is given back once the last half-block has ended (the sampled outputs are written after it): a
    child that goes on writing files and exiting, or never answers the window's end, holds it no longer."""
    reference = ReferenceCache().get(task, options)
    following_one = {"checks_s": 1.5, "window_s": 0.3}
    finishing_one = {"checks_s": 0.1, "window_s": 0.3, "after_window_s": 6.0, "says_timed": answers_the_end}
    finishing, following = race(task, options, reference, finishing_one, following_one)
    assert following["window"][0] < finishing["after_window"][1] - 1.0  # timed while the other was still ending
    assert not overlaps(following["window"], finishing["window"])


def test_a_child_writing_its_output_files_holds_no_device(task, options):
    """Once a child says its checks' device work is over (outputs copied to the host), another's window need not
    wait for its files; a child that never says so is waited for until its files are written."""
    reference = ReferenceCache().get(task, options)

    following_one = {"checks_s": 1.0, "window_s": 0.3}
    writing, following = race(task, options, reference, {"checks_s": 0.1, "write_s": 5.0, "wrong_output": True},
                              following_one)  # fmt: skip
    assert following["window"][1] < writing["files"][1] - 1.0  # timed while the other was writing files

    silent = {"checks_s": 0.1, "write_s": 3.0, "wrong_output": True, "says_checks_done": False}
    writing, following = race(task, options, reference, silent, following_one)
    assert following["window"][0] > writing["files"][1]  # no word: its hold lasted until its files were written


def test_a_crashing_neighbour_changes_no_verdict(task, options):
    """Verdicts of a stream with several workers per device do not depend on what ran beside them: every pair
    gets one record, the one it gets alone, whatever crashed, hung or failed next to it."""
    designs = {"ok0": {"checks_s": 0.2}, "bad": {"wrong_output": True}, "seg": {"do": "segfault"},
               "hang": {"do": "hang"}, "ok1": {"window_s": 0.2}, "claims": {"status": "incorrect", "max_diff": 1.0},
               "ok2": {}, "garbage": {"do": "garbage"}}  # fmt: skip
    expected = {"ok0": "correct", "bad": "incorrect", "seg": "crash", "hang": "timeout", "ok1": "correct",
                "claims": "incorrect", "ok2": "correct", "garbage": "crash"}  # fmt: skip
    verifier = Verifier(replace(options, eval_workers=3, timeout_s=6))
    pairs = [(candidate(task, design, name), task) for name, design in designs.items()]
    records = list(verifier.stream(pairs))
    assert sorted(r.kernel_name for r in records) == sorted(designs)  # none lost, none twice
    assert {r.kernel_name: r.status for r in records} == expected
    assert fake_children() == []


@pytest.mark.parametrize("directive", [{}, {"wrong_output": True}])
def test_the_outputs_of_the_checks_are_compared_once_per_candidate(task, options, monkeypatch, directive):
    from builder.verify.engine import evaluation

    reference = ReferenceCache().get(task, options)
    calls = []
    real = evaluation.judge.find_checks
    monkeypatch.setattr(evaluation.judge, "find_checks", lambda *a: calls.append(1) or real(*a))
    result = judged(task, options, reference, directive, "once")
    assert result["status"] == ("incorrect" if directive else "correct")
    assert len(calls) == 1  # by the watcher, as soon as they were written; weighed again without comparing


def test_a_watcher_looks_at_its_childs_files_less_often_while_nothing_changes(task, options, monkeypatch):
    """Eight watchers looking every 2 ms held the parent's interpreter lock against its judging: while the
    child's state stands still the looks back off (to `JUDGE_POLL_MAX_S`)."""
    from builder import config
    from builder.verify.engine import evaluation

    reference = ReferenceCache().get(task, options)
    looks = []
    real = evaluation.tensor_files.is_complete
    monkeypatch.setattr(evaluation.tensor_files, "is_complete", lambda d: looks.append(1) or real(d))
    result = judged(task, options, reference, {"checks_s": 2.0}, "patient")
    assert result["status"] == "correct"
    # 2 s of checks: about a thousand looks every JUDGE_POLL_S, about eighty at JUDGE_POLL_MAX_S.
    assert len(looks) < 1.0 / config.JUDGE_POLL_S / 4, len(looks)


def test_a_watcher_looking_at_leisure_hears_of_a_waiting_owner_at_once(monkeypatch):
    from builder import config
    from builder.verify.engine.device_gate import DeviceGate
    from builder.verify.engine.evaluation import _Watcher

    monkeypatch.setattr(config, "JUDGE_POLL_MAX_S", 30.0)
    gate = DeviceGate()
    watcher = _Watcher({}, None, gate)
    watcher._poll_s = config.JUDGE_POLL_MAX_S  # nothing changed for a while: its looks backed off as far as they go
    gate.watch_owners(watcher.wake)
    assert gate.acquire_shared()
    owner = object()
    threading.Thread(target=lambda: gate.acquire_exclusive(owner), daemon=True).start()
    began = time.monotonic()
    watcher._nap()
    assert time.monotonic() - began < 5.0  # not the 30 s its back-off had reached
    assert watcher._poll_s == config.JUDGE_POLL_S  # and it looks briskly again
    gate.release_shared()


def test_references_computed_early_are_the_ones_evaluations_get_and_never_more_than_the_cache_holds(task, options):
    other = load_suite().get("1/2")
    cache = ReferenceCache(capacity=1)
    with ThreadPoolExecutor(2) as warmers:
        cache.prewarm(task, options, warmers)
        cache.prewarm(other, options, warmers)  # no room left: left to its first candidate
        cache.prewarm(task, options, warmers)  # already on its way
    assert cache.computed == 1
    early = cache.get(task, options)
    assert cache.computed == 1 and early.error is None and early.manifest
    cache.prewarm(task, options, ThreadPoolExecutor(1))  # held already: nothing to do
    assert cache.computed == 1
