"""`reverify` leads its stream with the control kernel (`control_gate.py`), as a build does: no record is journaled
before the control's verdict, none where it fails, and an archive's own pair of the control kernel goes in a stream
after the first."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from pipeline_fakes import StreamControlVerifier

from builder import config
from builder.errors import PREFLIGHT_FAILED, InfrastructureError
from builder.generate.bundled import BundledGenerator
from builder.pipeline.reverify_run import PROGRESS_JSONL, ReverifyParams, _verify
from builder.tasks import load_suite
from builder.verify.engine.preflight import control_pair

CONTROL = ("1/19", "control")


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "CACHE_DIR", tmp_path / "cache")
    StreamControlVerifier.streams.clear()


def pairs(with_control: bool = False):
    """The bundled CPU kernels of task 1/1; `with_control`: and the control kernel as an archive would hold it."""
    tasks = [load_suite().get("1/1")]
    found = [(candidate, tasks[0]) for candidate in BundledGenerator("cpu").candidates(tasks)]
    if with_control:
        candidate, task = control_pair("cpu")
        found.append((replace(candidate, generator="bundled", kernel_name="naive"), task))
    return found


def reverify(tmp_path, given, outcome: str = "correct"):
    params = ReverifyParams(dataset="unused", out=tmp_path / "out", progress=False)
    return _verify(given, "cpu", params, tmp_path / "out", StreamControlVerifier.with_control(outcome))


def journal(tmp_path) -> list[tuple[str, str]]:
    path = tmp_path / "out" / PROGRESS_JSONL
    lines = path.read_text().splitlines() if path.exists() else []
    return [(row["task_id"], row["kernel_name"]) for row in map(json.loads, lines)]


def test_the_control_leads_and_its_record_is_not_the_runs_and_a_pass_is_remembered(tmp_path):
    given = pairs()
    records = reverify(tmp_path, given)
    (streamed,) = StreamControlVerifier.streams
    assert streamed[0] == CONTROL and len(streamed) == len(given) + 1
    assert [(r.task_id, r.kernel_name) for r in records] == journal(tmp_path) == streamed[1:]
    StreamControlVerifier.streams.clear()
    reverify(tmp_path / "again", given)
    assert CONTROL not in StreamControlVerifier.streams[0]  # passed lately: nothing to lead with


@pytest.mark.parametrize("outcome", ["incorrect", "machinery", "lost"])
def test_a_control_that_does_not_pass_stops_the_run_with_nothing_journaled(tmp_path, outcome):
    with pytest.raises(InfrastructureError, match=PREFLIGHT_FAILED):
        reverify(tmp_path, pairs(), outcome)
    assert journal(tmp_path) == []


def test_an_archives_own_pair_of_the_control_kernel_goes_in_the_next_stream(tmp_path):
    given = pairs(True)
    records = reverify(tmp_path, given)
    first, second = StreamControlVerifier.streams
    own = (given[-1][1].id, given[-1][0].kernel_name)
    assert first[0] == CONTROL and own not in first[1:] and second == [own]
    assert len(records) == len(given) and journal(tmp_path)[-1] == own
