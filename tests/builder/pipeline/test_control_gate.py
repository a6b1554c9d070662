"""The control kernel leading a build's first stream (`control_gate.py`): every outcome before the control's is
held, stored once it passes and never where it does not; a build's own pair of the control kernel waits for the
next stream (no stream holds a key twice); a pass is remembered, so the next build streams no control."""

from __future__ import annotations

import pytest
from pipeline_fakes import StreamControlVerifier

from builder import config
from builder.errors import InfrastructureError
from builder.pipeline.build import BuildParams, Orchestrator
from builder.pipeline.store import Store

CONTROL = ("1/19", "control")  # the CPU control kernel's task, and the name it streams under


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "CACHE_DIR", tmp_path / "cache")
    StreamControlVerifier.streams.clear()


def build(out, tasks: str, outcome: str = "correct") -> Orchestrator:
    params = BuildParams(out=out, backend="cpu", generator="bundled", tasks=tasks)
    orchestrator = Orchestrator(params, show_progress=False, make_verifier=StreamControlVerifier.with_control(outcome))
    orchestrator.run()
    return orchestrator


def markers(tmp_path):
    return list((tmp_path / "cache" / config.PREFLIGHT_CACHE_SUBDIR).glob("*.json"))


def stored(out) -> list[tuple[str, str]]:
    with Store.open_existing(out) as store:
        return sorted(store.con.execute("SELECT task_id, kernel_name FROM records").fetchall())


def test_the_records_before_the_controls_are_stored_once_it_passes_and_the_next_build_streams_none(tmp_path):
    first = build(tmp_path / "a", "^1/1$")
    (streamed,) = StreamControlVerifier.streams
    assert streamed[0] == CONTROL and CONTROL not in streamed[1:]
    records = stored(tmp_path / "a")
    assert records and first.counters.stored == len(records) == len(streamed) - 1
    assert all(task == "1/1" for task, _ in records)  # the control's own record is not the build's
    assert first.counters.submitted == len(records)  # nor counted as submitted
    assert set(first.counters.control) == {"judged_s", "compile_s", "eval_s"} and first.counters.held == 0
    assert len(markers(tmp_path)) == 1

    StreamControlVerifier.streams.clear()
    build(tmp_path / "b", "^1/1$")
    (streamed,) = StreamControlVerifier.streams
    assert CONTROL not in streamed and stored(tmp_path / "b") == records


@pytest.mark.parametrize(("outcome", "says"), [
    ("incorrect", "naive.cpp on task 1/19) came out incorrect"),
    ("machinery", "naive.cpp on task 1/19) could not be verified: the sandbox did not start: bwrap: fake"),
    ("lost", "the stream ended without the control kernel's outcome"),
])  # fmt: skip
def test_a_control_that_does_not_pass_in_the_stream_stops_the_build_with_nothing_stored(tmp_path, outcome, says):
    with pytest.raises(InfrastructureError) as raised:
        build(tmp_path / "a", "^1/1$", outcome)
    assert str(raised.value).startswith("preflight failed, nothing was verified or stored: ")
    assert says in str(raised.value)
    (streamed,) = StreamControlVerifier.streams
    assert len(streamed) > 1  # the build's own records came first, and were held
    assert stored(tmp_path / "a") == [] and markers(tmp_path) == []
    with Store.open_existing(tmp_path / "a") as store:
        assert store.waiting() == [] and store.builds()[-1]["state"] == "failed"


def test_the_builds_own_pair_of_the_control_kernel_is_verified_in_the_next_stream_and_stored(tmp_path):
    orchestrator = build(tmp_path / "a", "^1/19$")  # relu: its bundled naive.cpp is the CPU control kernel
    first, second = StreamControlVerifier.streams
    assert first[0] == CONTROL and ("1/19", "naive") not in first and second == [("1/19", "naive")]
    assert stored(tmp_path / "a") == sorted([*first[1:], *second]) and orchestrator.counters.stored == len(first)
    assert orchestrator.counters.submitted == len(first) and orchestrator.counters.held == 0
    assert len(markers(tmp_path)) == 1
