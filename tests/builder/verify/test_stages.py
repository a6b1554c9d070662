"""The stream's stages one at a time, over real channels, with fakes where a stage would start children."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from builder.candidates import Candidate
from builder.tasks import load_suite
from builder.verify.compile.extension import CompileResult
from builder.verify.engine.channels import Channel
from builder.verify.engine.hand_back import WINDOW_END
from builder.verify.engine.one_kernel import Evaluated
from builder.verify.engine.stages import Built, CompileStage, FinishStage, PrepareStage
from builder.verify.options import VerifyOptions


@pytest.fixture(scope="module")
def tasks():
    suite = load_suite()
    return suite.get("1/1"), suite.get("1/2")


def python_candidate(task, name: str) -> Candidate:
    return Candidate(task_id=task.id, source=f"# {name}\nclass ModelNew: ...\n", language="python", kernel_name=name)


def drain(channel: Channel) -> list:
    items = []
    while (item := channel.receive()) is not None:
        items.append(item)
    return items


def test_a_channel_ends_for_every_consumer_once_every_producer_closed_it():
    channel: Channel[int] = Channel(producers=2, consumers=2)
    channel.send(1)
    channel.close()
    channel.send(2)
    channel.close()
    assert sorted([channel.receive(), channel.receive()]) == [1, 2]
    assert channel.receive() is None and channel.receive() is None


def test_a_stopped_stream_frees_a_blocked_producer_and_a_waiting_consumer():
    stop = threading.Event()
    full: Channel[int] = Channel(stop, maxsize=1)
    full.send(1)
    empty: Channel[int] = Channel(stop)
    answers: dict[str, object] = {}
    threads = [threading.Thread(target=lambda: answers.setdefault("sent", full.send(2))),
               threading.Thread(target=lambda: answers.setdefault("received", empty.receive()))]  # fmt: skip
    for thread in threads:
        thread.start()
    stop.set()
    for thread in threads:
        thread.join(timeout=5)
    assert answers == {"sent": False, "received": None}


def test_the_compile_stage_sends_each_pairs_task_as_it_is_read_and_every_build(tasks):
    first, second = tasks
    pairs = [(python_candidate(first, "a"), first), (python_candidate(second, "b"), second), WINDOW_END,
             (python_candidate(first, "c"), first)]  # fmt: skip
    stop = threading.Event()
    built: Channel[Built] = Channel(stop)
    seen: Channel = Channel(stop)
    failures: Channel = Channel(stop)
    stage = CompileStage(VerifyOptions(backend="cpu", batch_size=4, compile_workers=1), iter(pairs), built, seen,
                         failures)  # fmt: skip
    stage.start().join(timeout=60)
    assert [task.id for task in drain(seen)] == [first.id, second.id, first.id]
    names = sorted(item.candidate.kernel_name for item in drain(built))
    assert names == ["a", "b", "c"]
    failures.close()
    assert drain(failures) == []


def test_a_later_window_that_plans_sooner_queues_its_builds_after_the_earlier_windows(tasks, monkeypatch):
    """A worker takes the first build waiting when it is free: the second window (fewer candidates, planned sooner)
    must not fill the idle workers ahead of the first window's builds (its small first builds, at a stream's
    start)."""
    from builder.verify.engine import stages

    first, second = tasks
    # extern "C" keeps each candidate out of shared builds: one build each, in the order the worker takes them
    pairs = [(Candidate(task_id=task.id, source=f'extern "C" int {name}() {{ return 0; }}\n', language="cpp",
                        kernel_name=name), task)
             for name, task in (("w0a", first), ("w0b", second), ("w1a", first))]  # fmt: skip
    started: list[str] = []

    def slow_in_the_first_window(source, language, **keyed):
        if "w0" in source:
            threading.Event().wait(0.3)  # looking for earlier builds of many candidates takes a while
        return None

    def build(self, source, language, tries=None, urgent=False):
        started.append(source.split()[3].rstrip("()"))
        return CompileResult(ok=True)

    monkeypatch.setattr(stages, "recall_build", slow_in_the_first_window)
    monkeypatch.setattr(CompileStage, "_build", build)
    stop = threading.Event()
    built: Channel[Built] = Channel(stop)
    failures: Channel = Channel(stop)
    stage = CompileStage(VerifyOptions(backend="cpu", batch_size=2, compile_workers=1), iter(pairs), built,
                         Channel(stop), failures)  # fmt: skip
    stage.start().join(timeout=60)
    assert started == ["w0a", "w0b", "w1a"]
    assert sorted(item.candidate.kernel_name for item in drain(built)) == ["w0a", "w0b", "w1a"]
    failures.close()
    assert drain(failures) == []


@pytest.mark.parametrize("urgent_builds", [None, 0, 3])
def test_the_first_windows_urgent_builds_are_the_streams_option_and_a_later_windows_none(tasks, monkeypatch,
                                                                                          urgent_builds):  # fmt: skip
    """The compile stage makes its first window's first `urgent_builds` builds urgent, from the option (which an
    engine process inherits from its stream: test_device_engines.py; None: one GPU's rule), and none of a later
    window's."""
    from builder import config

    first, second = tasks
    pairs = [(Candidate(task_id=task.id, source=f'extern "C" int k{n}() {{ return {n}; }}\n', language="cpp",
                        kernel_name=f"k{n}"), task)
             for n, task in enumerate([first, second] * 3)]  # fmt: skip
    pairs.insert(2, WINDOW_END)  # a first window of two, then one of four
    asked: list[bool] = []  # each build's urgency, in the order the one worker takes them

    def build(self, source, language, tries=None, urgent=False):
        asked.append(urgent)
        return CompileResult(ok=True)

    monkeypatch.setattr(CompileStage, "_build", build)
    stop = threading.Event()
    built: Channel[Built] = Channel(stop)
    failures: Channel = Channel(stop)
    options = VerifyOptions(backend="cpu", batch_size=8, compile_workers=1, urgent_builds=urgent_builds)
    CompileStage(options, iter(pairs), built, Channel(stop), failures).start().join(timeout=60)
    expected = config.urgent_builds_for(1) if urgent_builds is None else urgent_builds
    assert asked == [True] * min(expected, 2) + [False] * (6 - min(expected, 2))
    failures.close()
    assert drain(failures) == []


def test_the_prepare_stage_starts_references_on_cuda_only_and_baselines_always(tasks):
    class Recording:
        first_ended = threading.Event()

        def __init__(self) -> None:
            self.prewarmed: list[str] = []

        def prewarm(self, task, *args, **kwargs) -> None:
            self.prewarmed.append(task.id)

    for backend, references_expected in (("cpu", []), ("cuda", [t.id for t in tasks])):
        channel: Channel = Channel()
        references, baselines = Recording(), Recording()
        stage = PrepareStage(VerifyOptions(backend=backend), channel, references, baselines, Channel())
        for task in tasks:
            channel.send(task)
        channel.close()
        stage.start().join(timeout=10)
        stage.close()
        assert references.prewarmed == references_expected
        assert baselines.prewarmed == [t.id for t in tasks]


def test_the_finish_stage_passes_records_on_and_a_failure_ends_it(tasks):
    evaluated: Channel[Evaluated] = Channel()
    records: Channel = Channel()
    record = object()
    evaluated.send(Evaluated(record=record))  # nothing left to wait for: the record itself
    evaluated.send(Evaluated(candidate=python_candidate(tasks[0], "x"), task=tasks[0]))  # no options: it fails
    evaluated.close()
    FinishStage(evaluated, records, baselines=None).start().join(timeout=10)
    out = drain(records)
    assert out[0] is record and isinstance(out[1], BaseException) and len(out) == 2


def test_the_control_kernels_record_is_its_verdict_alone_without_a_baseline_or_profiles(monkeypatch):
    """The control kernel leads a build's stream, whose records wait for its verdict (pipeline/control_gate.py):
    its timing window goes first, and its record goes out as soon as it is judged, never through a finisher that
    waits for a baseline or profiles."""
    from builder import config
    from builder.verify.engine import one_kernel, stages
    from builder.verify.engine.clean_reference import ReferenceCache
    from builder.verify.engine.preflight import control_pair
    from builder.verify.engine.stages import EvaluateStage
    from builder.verify.judge import verdict

    control, task = control_pair("cpu")
    options = VerifyOptions(backend="cpu", profile=True, prestart=0)
    other = python_candidate(task, "other")
    impostor = replace(python_candidate(task, "impostor"), generator=config.INFRA_CONTROL_GENERATOR)  # not its source

    first_in_line: dict[str, bool] = {}

    def evaluated_correct(compiled, candidate, task, options, *args):
        first_in_line[candidate.kernel_name] = options.first_in_line
        return Evaluated(candidate=candidate, task=task, options=options, compiled=compiled, status="correct",
                         base=verdict.base_fields(candidate, task, "cpu"), result={"runtime": {"median_ms": 1.0}})  # fmt: skip

    def no_baseline_nor_profile(*args, **kwargs):
        raise AssertionError("the control kernel's record waited for a baseline or a profile")

    monkeypatch.setattr(stages, "start_evaluation", evaluated_correct)
    monkeypatch.setattr(one_kernel, "BaselineCache", no_baseline_nor_profile)
    monkeypatch.setattr(one_kernel, "attach_profiles", no_baseline_nor_profile)
    stop = threading.Event()
    built: Channel[Built] = Channel(stop)
    evaluated: Channel[Evaluated] = Channel(stop)
    records: Channel = Channel(stop)
    for candidate in (control, other, impostor):
        built.send(Built(candidate, task, CompileResult(ok=True)))
    built.close()
    EvaluateStage(options, built, evaluated, records, ReferenceCache(), confirm=None).start().join(timeout=30)
    records.close()
    evaluated.close()
    (record,) = drain(records)
    assert not isinstance(record, BaseException), repr(record)
    assert record.kernel_name == "control" and record.status == "correct" and record.eager_ms is None
    assert [item.candidate.kernel_name for item in drain(evaluated)] == ["other", "impostor"]  # to a finisher
    assert first_in_line == {"control": True, "other": False, "impostor": False}  # its window goes first
