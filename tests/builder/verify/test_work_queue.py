"""The evaluation workers' queue: the oldest item that can start now goes first, END is never overtaken, and a
stream evaluates the candidates of a task whose reference is ready while another task's is still computed."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import replace

import pytest

from builder import config
from builder.tasks import load_suite
from builder.verify import clean_reference
from builder.verify.compile import CompileResult
from builder.verify.engine import Verifier, VerifyOptions
from builder.verify.work_queue import END, Readiness, ReadyFirstQueue, evaluation_readiness
from tests.builder.verify.test_engine import FAKE_CHILD, candidate

READY, PREPARING, UNPREPARED = Readiness.READY, Readiness.PREPARING, Readiness.UNPREPARED


@pytest.fixture
def options(tmp_path):
    return VerifyOptions(backend="cpu", timeout_s=60, child_module=FAKE_CHILD, trials=3,
                         baseline_cache_dir=tmp_path / "baselines", build_cache_dir=tmp_path / "builds")  # fmt: skip


def filled(*items, maxsize: int = 16) -> ReadyFirstQueue:
    work = ReadyFirstQueue(maxsize)
    for item in items:
        work.put(item)
    return work


def by_name(states: dict):
    return lambda item: Readiness.IN_ORDER if item is END else states[item]


def test_a_ready_item_goes_before_older_ones_that_wait():
    states = {"a": PREPARING, "b": UNPREPARED, "c": READY, "d": READY}
    work = filled("a", "b", "c", "d")
    assert work.get(by_name(states)) == "c"
    assert work.get(by_name(states)) == "d"
    # Nothing ready: the first item whose worker would prepare it, not one prepared elsewhere.
    assert work.get(by_name(states)) == "b"
    assert work.qsize() == 1


def test_with_nothing_ready_a_worker_waits_until_told_something_changed():
    states = {"a": PREPARING, "b": PREPARING}
    work = filled("a", "b")
    taken: list = []
    worker = threading.Thread(target=lambda: taken.append(work.get(by_name(states), recheck_s=30)))
    worker.start()
    time.sleep(0.2)
    assert taken == [] and worker.is_alive()  # both wait for references computed elsewhere
    states["b"] = READY
    work.notify()
    worker.join(5)
    assert taken == ["b"]


def test_a_readiness_changed_without_a_notification_is_seen_at_the_next_look():
    states = {"a": PREPARING}
    work = filled("a")
    threading.Timer(0.2, states.__setitem__, ("a", READY)).start()
    started = time.monotonic()
    assert work.get(by_name(states), recheck_s=0.05) == "a"
    assert time.monotonic() - started < 5


def test_end_is_taken_only_at_the_head_and_nothing_behind_it_goes_first():
    states = {"a": PREPARING, "late": READY}
    work = filled("a", END, "late")
    taken: list = []
    worker = threading.Thread(target=lambda: taken.append(work.get(by_name(states), recheck_s=30)))
    worker.start()
    time.sleep(0.2)
    assert taken == []  # "late" stays behind END, END behind "a"
    states["a"] = READY
    work.notify()
    worker.join(5)
    assert taken == ["a"]
    assert work.get(by_name(states)) is END
    assert work.get(by_name(states)) == "late"


def test_a_full_queue_refuses_after_its_timeout_and_clear_makes_room():
    work = filled("a", maxsize=1)
    with pytest.raises(queue.Full):
        work.put("b", timeout=0.1)
    with pytest.raises(queue.Full):
        work.put_nowait("b")
    waiting = threading.Thread(target=work.put, args=("b",), kwargs={"timeout": 30})
    waiting.start()
    work.clear()
    waiting.join(5)
    assert not waiting.is_alive() and work.get_nowait() == "b"
    with pytest.raises(queue.Empty):
        work.get_nowait()


def test_an_items_readiness_is_its_tasks_reference(options, monkeypatch):
    suite = load_suite()
    task = suite.get("1/1")
    gate, entered = threading.Event(), threading.Event()
    real = clean_reference.compute_clean_reference

    def held(*args, **kwargs):
        entered.set()
        assert gate.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(clean_reference, "compute_clean_reference", held)
    references = clean_reference.ReferenceCache()
    options = options.with_seeds()
    readiness = evaluation_readiness(references, options)
    built = ((candidate(task), task), CompileResult(ok=True))
    failed = ((candidate(task), task), CompileResult(ok=False, error="nvcc said no"))
    assert readiness(END) is Readiness.IN_ORDER
    assert readiness(failed) is READY  # a failed build is recorded without a reference
    assert readiness(built) is UNPREPARED
    work = filled(built)
    references.listen(work.notify)  # as a stream's queue does
    computing = threading.Thread(target=references.get, args=(task, options))
    computing.start()
    assert entered.wait(30)
    assert readiness(built) is PREPARING
    taken: list = []
    worker = threading.Thread(target=lambda: taken.append(work.get(readiness, recheck_s=60)))
    worker.start()
    time.sleep(0.2)
    assert taken == []  # its reference is under way elsewhere
    started = time.monotonic()
    gate.set()
    computing.join(60)
    worker.join(30)
    assert taken == [built] and time.monotonic() - started < 30  # told at once, not at its next look
    assert readiness(built) is READY
    work = worker = None  # a stream's queue goes with its stream: the cache no longer calls it
    references.get(suite.get("1/2"), options)


def test_a_stream_evaluates_a_ready_tasks_candidates_while_another_tasks_reference_is_computed(options, monkeypatch):
    suite = load_suite()
    slow, quick = suite.get("1/1"), suite.get("1/2")
    release, entered = threading.Event(), threading.Event()
    real = clean_reference.compute_clean_reference

    def compute(task, *args, **kwargs):
        if task.id == slow.id:
            entered.set()
            assert release.wait(60), "the slow reference was never released"
        return real(task, *args, **kwargs)

    monkeypatch.setattr(clean_reference, "compute_clean_reference", compute)
    verifier = Verifier(replace(options, eval_workers=1))
    with_seeds = verifier.options
    warming = threading.Thread(target=verifier.references.get, args=(slow, with_seeds), daemon=True)
    warming.start()  # as `prewarm` does on CUDA: the slow task's reference is under way when the stream starts
    assert entered.wait(30)
    pairs = [(candidate(slow, {"status": "correct"}, "slow-1"), slow),
             (candidate(slow, {"status": "correct"}, "slow-2"), slow),
             (candidate(quick, {"status": "correct"}, "quick-1"), quick),
             (candidate(quick, {"status": "correct"}, "quick-2"), quick)]  # fmt: skip
    stream = verifier.stream(pairs)
    first_two = [next(stream).kernel_name for _ in range(2)]
    assert sorted(first_two) == ["quick-1", "quick-2"]  # one worker, the slow task's candidates queued first
    release.set()
    rest = list(stream)
    assert sorted(r.kernel_name for r in rest) == ["slow-1", "slow-2"]
    assert all(r.status == "correct" for r in rest)


def test_with_ready_first_off_every_item_waits_its_turn(options, monkeypatch):
    task = load_suite().get("1/1")
    failed = ((candidate(task), task), CompileResult(ok=False, error="nvcc said no"))
    references = clean_reference.ReferenceCache()
    off = evaluation_readiness(references, replace(options, take_ready_first=False).with_seeds())
    assert off(failed) is Readiness.IN_ORDER
    monkeypatch.setattr(config, "EVAL_TAKE_READY_FIRST", False)  # None: the config's
    assert evaluation_readiness(references, options.with_seeds())(failed) is Readiness.IN_ORDER
    monkeypatch.setattr(config, "EVAL_TAKE_READY_FIRST", True)
    assert evaluation_readiness(references, options.with_seeds())(failed) is READY
    work = filled("a", "b")  # "b" ready, "a" not: in order all the same
    in_order = lambda item: Readiness.IN_ORDER  # noqa: E731 - what `off` says of every item
    assert work.get(in_order) == "a" and work.get(in_order) == "b"
