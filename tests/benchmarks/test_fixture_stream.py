"""benchmarks/fixture_stream.py over a stream's outcomes (the stream itself is the adversarial test's)."""

from __future__ import annotations

import json

from benchmarks import fixture_stream


def _outcome(status: str, flags: list[str], error: str | None = None, method: str = "") -> dict:
    record = {"status": status, "flags": flags, "error": error, "timing_method": method, "backend": "cuda",
              "max_diff": None, "flag_notes": "{}", "eager_ms": 0.008, "eager_clean_ms": 0.0079, "runtime_ms": 0.0078,
              "floor_ms": 0.002, "speed_of_light": 0.26}  # fmt: skip
    return {"returncode": 0, "record": record, "stderr": ""}


def test_each_verdict_is_checked_and_second_looks_are_counted(monkeypatch, tmp_path, capsys):
    outcomes = {
        "cuda/correct_scale_shift.cu": _outcome(
            "correct", [], method="refereed; evaluated twice, each in a fresh child"
        ),
        "cuda/incorrect_wrong_result.cu": _outcome("correct", []),  # the manifest wants incorrect
    }
    monkeypatch.setattr(fixture_stream, "run_stream", lambda backend, cache: outcomes)
    records = tmp_path / "records.jsonl"
    assert fixture_stream.main(["--label", "loaded", "--records", str(records)]) == 1
    out = capsys.readouterr().out
    assert "loaded PASS cuda/correct_scale_shift.cu: correct, evaluated twice: True" in out
    assert "loaded FAIL cuda/incorrect_wrong_result.cu: correct, evaluated twice: False" in out
    assert "loaded: 1 of 2 as the manifest expects, 1 evaluated twice" in out
    assert [json.loads(line)["status"] for line in records.read_text().splitlines()] == ["correct", "correct"]


def test_a_disqualified_second_look_is_told_by_its_error():
    assert fixture_stream.looked_twice({"error": "slowed_baseline: ...; in the first evaluation, PyTorch eager took"})
    assert not fixture_stream.looked_twice({"error": None, "timing_method": None})
