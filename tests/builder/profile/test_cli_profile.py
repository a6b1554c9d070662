"""`kernel-archive profile`: argument checks, JSON shape, and clang-tidy alone without the engine."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from builder.cli import app
from builder.errors import UsageError

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
    import builder.verify.engine.one_kernel as one_kernel
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

    monkeypatch.setattr(one_kernel, "compile_candidate", fake_compile)
    monkeypatch.setattr(engine, "evaluate_compiled", fake_evaluate)
    result = runner.invoke(app, ["profile", str(CANDIDATE), "--task", "1/1", "--backend", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert set(printed) == {"ncu", "torch_profile", "clang_tidy"}
    assert printed["torch_profile"]["own_fraction"] == 0.5
    assert calls["options"].profile is True and calls["options"].backend == "cpu"
