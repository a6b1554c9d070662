"""The throughput bench's view of engine processes: each engine's totals, logged at its stream's end, as figures
from the run's start (one monotonic clock for every process of the machine)."""

from __future__ import annotations

import json
import logging

from benchmarks import throughput_figures as figures
from benchmarks import throughput_observers as observers

TOTALS = {"records": 10, "started_at": 101.5, "last_record_at": 131.25, "references": 2, "reference_s": 11.0,
          "milestones": {"zygote_ready": 106.0, "start_received": 101.75, "first_record": 110.5},
          "reference_ready_at": [109.0, 107.25], "baseline_children_s": [12.0, 14.0],
          "gate": {"owner_wait_s": 5.0, "drain_s": 1.0, "unheld_s": 0.3, "shared_s": 4.25, "yields": 12, "stopping_s": 0.135,
                   "by_purpose": {"timing": 3.2, "baseline": 1.5}}}  # fmt: skip


def test_an_engines_totals_read_as_figures_from_the_runs_start():
    lines = figures.engine_lines(TOTALS, started=100.0)
    assert lines[0] == "started at 1.5 s; 10 records, the last at 31.2 s"
    assert lines[1] == "milestones: start_received 1.8, zygote_ready 6.0, first_record 10.5"  # in the order reached
    assert lines[2] == "clean references: 2, 5.50 s each; ready at 7.2, 9.0 s"
    adopted = {**TOTALS, "references_adopted": 1, "reference_ready_at": [100.0 + at for at in range(8, 0, -1)]}
    assert figures.engine_lines(adopted, started=100.0)[2] == (
        "clean references: 2, 5.50 s each, 1 adopted from another engine; ready at 1.0, 2.0, 3.0, 4.0 ... 7.0, 8.0 s"
    )
    assert lines[3] == "baseline children: 2, wall 13.0 s each; measured baselines 1.5 s of its device"
    assert lines[4] == ("device s/kernel: timing windows 0.32, held shared 0.42, owners waiting 0.50, unowned while "
                        "an owner waited 0.10, held by nobody 0.03; checks yielded per kernel 1.20; stopping and continuing "
                        "members 13.5 ms")  # fmt: skip
    assert lines[5] == "children that waited for room on the scratch disk: 0, 0.0 s in all"
    waited = figures.engine_lines({**TOTALS, "disk_room_waits": 3, "disk_room_waited_s": 4.25}, started=100.0)
    assert waited[5] == "children that waited for room on the scratch disk: 3, 4.2 s in all"


def test_an_engine_stopped_before_its_streams_end_says_so():
    stopped = {**TOTALS, "stopped": True}
    assert figures.engine_lines(stopped, started=100.0)[0] == (
        "started at 1.5 s; 10 records, the last at 31.2 s; stopped before its stream's end"
    )
    assert figures.engine_lines(stopped, started=100.0)[1:] == figures.engine_lines(TOTALS, started=100.0)[1:]


def test_an_engine_without_milestones_says_so():
    assert figures.milestone_line({}, started=0.0) == "milestones: none"
    assert figures.engine_lines({"records": 0}, started=0.0)[0] == "started at 0.0 s; 0 records"


def test_the_last_engine_alone_at_the_end_is_the_spread_of_their_last_records():
    assert figures.alone_at_the_end([TOTALS, {**TOTALS, "last_record_at": 120.0}]) == 11.25
    assert figures.alone_at_the_end([TOTALS, {**TOTALS, "last_record_at": None}]) != 0.0  # one with a last record: nan


def test_the_phase_log_keeps_each_engines_totals_by_process():
    phase_log = observers.PhaseLog()
    record = logging.makeLogRecord({"msg": "engine totals: %s", "args": (json.dumps(TOTALS),),
                                    "processName": "engine-1", "levelno": logging.DEBUG})  # fmt: skip
    phase_log.emit(record)
    phase_log.emit(logging.makeLogRecord({"msg": "engine totals: {not json", "processName": "engine-0"}))
    assert phase_log.engines == {"engine-1": TOTALS} and phase_log.phases == []


def test_the_phase_log_counts_the_pairs_handed_back_at_the_end():
    phase_log = observers.PhaseLog()
    for engine, count in ((0, 5), (1, 4)):
        phase_log.emit(logging.makeLogRecord({"name": "builder.verify.engine.device_engines", "args": (engine, count),
                                              "msg": "engine %d handed back %d pairs"}))  # fmt: skip
    phase_log.emit(
        logging.makeLogRecord({"name": "builder.verify.engine.verifier", "msg": "kernel handed back 3 times"})
    )
    assert phase_log.handed_back == [5, 4]


def test_the_middle_rate_leaves_out_the_start_and_the_last_records():
    # a slow start (10 s for the first record), then one record a second, then a straggler
    times = [10.0 + i for i in range(11)] + [60.0]
    assert figures.middle_rate(times) == 3600.0  # records 3 to 8: 5 in 5 s
    assert figures.middle_rate([1.0]) != figures.middle_rate([1.0])  # too few records: nan


def test_the_build_counter_passes_the_engines_build_arguments_on(monkeypatch):
    """The bench wraps the compile stage's build: what the stage asks of it (a shared build's `tries`) reaches it."""
    from builder.verify.compile.extension import CompileResult
    from builder.verify.compile.headers import HeaderTries
    from builder.verify.engine import stages

    asked: list[tuple] = []

    def engine_build(stage, source, language, tries=HeaderTries.EVERY_RUNG):
        asked.append((source, language, tries))
        return CompileResult(ok=True, cache_key="k", cpu_s=2.0)

    monkeypatch.setattr(observers, "_ENGINE_BUILD", engine_build)
    monkeypatch.setattr(stages.CompileStage, "_build", stages.CompileStage._build)  # restored after the test
    counter = observers.CountingVerifier.__new__(observers.CountingVerifier)
    counter.builds, counter.members, counter.timeline = {}, {}, []
    counter._count_builds()
    stages.CompileStage._build(None, "src", "cuda", tries=HeaderTries.LIGHTEST_ONLY)
    assert asked == [("src", "cuda", HeaderTries.LIGHTEST_ONLY)] and counter.builds == {"k": 2.0}
