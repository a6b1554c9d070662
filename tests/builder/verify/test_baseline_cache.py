"""BaselineCache's early measurement: when it starts (the measurement itself runs a child: test_engine.py and the
GPU tests)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from builder.tasks import load_suite
from builder.verify.engine.baseline_cache import BaselineCache
from builder.verify.options import VerifyOptions


@pytest.fixture
def measured(monkeypatch):
    """The (task id, monotonic time) of each measurement begun, none of them run."""
    began: list[tuple[str, float]] = []
    monkeypatch.setattr(
        BaselineCache, "_measure", lambda self, task, options, **_: began.append((task.id, time.monotonic()))
    )
    return began


def test_an_early_baseline_waits_for_the_builds_first_reference(tmp_path, measured):
    task = load_suite().get("1/1")
    cache, first_reference = BaselineCache(tmp_path), threading.Event()
    with ThreadPoolExecutor(2) as warmers:
        cache.prewarm(task, VerifyOptions(backend="cuda"), warmers, after=first_reference)
        time.sleep(0.5)
        assert measured == []  # its set-up would take the cores the first reference needs
        ended = time.monotonic()
        first_reference.set()
    assert [name for name, _ in measured] == [task.id] and measured[0][1] >= ended


def test_an_early_baseline_still_waiting_when_the_build_stops_is_not_measured(tmp_path, measured):
    task = load_suite().get("1/1")
    stop = threading.Event()
    with ThreadPoolExecutor(1) as warmers:
        BaselineCache(tmp_path).prewarm(task, VerifyOptions(backend="cuda"), warmers, cancel=stop,
                                        after=threading.Event())  # fmt: skip
        stop.set()
    assert measured == []  # the warmer ended rather than waiting for a reference that never comes


def test_no_baseline_is_measured_early_on_the_cpu_backend(tmp_path, measured):
    with ThreadPoolExecutor(1) as warmers:
        BaselineCache(tmp_path).prewarm(load_suite().get("1/1"), VerifyOptions(backend="cpu"), warmers)
    assert measured == []


def test_a_kernel_waits_for_its_own_tasks_baseline_not_for_those_queued_ahead_of_it(tmp_path, monkeypatch):
    suite = load_suite()
    ahead, own = suite.get("1/1"), suite.get("1/2")
    release, began = threading.Event(), []

    def measure(self, task, options, **_):
        began.append(task.id)
        if task.id == ahead.id:
            release.wait(10)  # the only early worker is busy with the task ahead

    monkeypatch.setattr(BaselineCache, "_measure", measure)
    cache, options = BaselineCache(tmp_path), VerifyOptions(backend="cuda")
    with ThreadPoolExecutor(1) as warmers:
        cache.prewarm(ahead, options, warmers)
        cache.prewarm(own, options, warmers)
        while not began:
            time.sleep(0.01)
        cache.get(own, options)  # returns while the task ahead is still being measured
        assert began == [ahead.id, own.id]
        release.set()
    assert began == [ahead.id, own.id]  # the queued early measurement was taken out, not made a second time
