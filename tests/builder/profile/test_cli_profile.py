"""`kernel-archive profile`: argument checks, JSON shape, and clang-tidy alone without the engine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from builder.cli import app
from builder.errors import UsageError
from builder.profile import clang_tidy

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "profile"
CANDIDATE = FIXTURES / "known_bugs.cpp"
runner = CliRunner()


def test_missing_candidate_is_a_usage_error(tmp_path):
    result = runner.invoke(app, ["profile", str(tmp_path / "none.cu"), "--task", "1/1"])
    assert isinstance(result.exception, UsageError)
    assert "candidate file not found" in str(result.exception)


def test_bad_backend_is_a_usage_error():
    result = runner.invoke(app, ["profile", str(CANDIDATE), "--task", "1/1", "--backend", "rocm"])
    assert isinstance(result.exception, UsageError)


def test_prints_the_three_profiles_from_the_engine_record(monkeypatch):
    import builder.verify.engine.verifier as engine
    from schemas import KernelRecord, field_names

    calls = {}

    def fake_compile(candidate, task, options):
        calls["options"] = options
        return "compiled"

    def fake_evaluate(compiled, candidate, task, options):
        record = KernelRecord(**{name: None for name in field_names()})
        record.status = "correct"
        record.ncu_profile = json.dumps({"error": "ncu profiles the CUDA backend only (backend=cpu)"})
        record.torch_profile = json.dumps({"tool": "torch.profiler", "own_fraction": 0.5, "operators": []})
        record.clang_tidy = json.dumps({"tool": "clang-tidy", "warnings": 1})
        return record

    monkeypatch.setattr(engine, "compile_candidate", fake_compile)
    monkeypatch.setattr(engine, "evaluate_compiled", fake_evaluate)
    result = runner.invoke(app, ["profile", str(CANDIDATE), "--task", "1/1", "--backend", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert set(printed) == {"ncu", "torch_profile", "clang_tidy"}
    assert printed["torch_profile"]["own_fraction"] == 0.5
    assert calls["options"].profile is True and calls["options"].backend == "cpu"


@pytest.mark.skipif(clang_tidy.clang_tidy_binary() is None, reason="clang-tidy wheel not installed")
def test_clang_tidy_works_without_the_engine(monkeypatch):
    monkeypatch.setitem(sys.modules, "builder.verify.engine.verifier", None)  # import now raises ImportError
    result = runner.invoke(app, ["profile", str(CANDIDATE), "--task", "1/1", "--backend", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert "verification engine unavailable" in printed["ncu"]["error"]
    assert "verification engine unavailable" in printed["torch_profile"]["error"]
    assert any(
        d["check"] == "bugprone-use-after-move" and d["line"] == 11 for d in printed["clang_tidy"]["diagnostics"]
    )
