"""profile_record_fields: the record's profile fields, every failure kept as {"error": reason}."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

import builder.profile as profile_pkg
from builder.profile import PROFILE_FIELDS, clang_tidy, ncu, profile_record_fields
from schemas import load_schema

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "profile"
CLEAN_CPP = "int twice(int x) { return 2 * x; }\n"
TIDY_RESULT = {"tool": "clang-tidy", "diagnostics": [], "counts": {"warning": 2}, "warnings": 2, "errors": 0}


def _conforms(fields: dict) -> None:
    properties = load_schema()["properties"]
    assert set(fields) == set(PROFILE_FIELDS)
    for name, value in fields.items():
        jsonschema.validate(value, properties[name])
        if name in ("ncu_profile", "torch_profile", "clang_tidy"):
            assert isinstance(json.loads(value), dict)


@pytest.fixture
def no_ncu(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))


def test_cpu_backend_fields(no_ncu):
    torch_summary = {"tool": "torch.profiler", "operators": [], "own_fraction": 0.25}
    fields = profile_record_fields(CLEAN_CPP, "cpp", backend="cpu", torch_profile=torch_summary,
                                   clang_tidy=TIDY_RESULT)  # fmt: skip
    _conforms(fields)
    assert json.loads(fields["ncu_profile"]) == {"error": "ncu profiles the CUDA backend only (backend=cpu)"}
    assert fields["torch_own_fraction"] == 0.25
    assert fields["clang_tidy_warnings"] == 2
    assert fields["ncu_duration_ms"] is None and fields["ncu_registers"] is None


def test_cuda_backend_without_ncu_and_without_a_profiled_call(no_ncu):
    fields = profile_record_fields(CLEAN_CPP, "cuda", backend="cuda", torch_profile=None,
                                   torch_profile_missing="runtime_error before profiling", clang_tidy=TIDY_RESULT)  # fmt: skip
    _conforms(fields)
    assert json.loads(fields["ncu_profile"]) == {"error": "ncu not found on PATH"}
    assert json.loads(fields["torch_profile"]) == {"error": "runtime_error before profiling"}
    assert fields["torch_own_fraction"] is None


def test_parsed_ncu_report_is_promoted(monkeypatch, tmp_path):
    monkeypatch.setattr(ncu, "ncu_available", lambda: "/usr/local/cuda/bin/ncu")
    report = tmp_path / "profile.csv"
    shutil.copy(FIXTURES / "ncu_details.csv", report)
    fields = profile_record_fields(CLEAN_CPP, "cuda", backend="cuda", ncu_report_path=report,
                                   clang_tidy=TIDY_RESULT)  # fmt: skip
    _conforms(fields)
    assert len(json.loads(fields["ncu_profile"])["kernels"]) == 2
    assert fields["ncu_registers"] == 24
    assert fields["ncu_duration_ms"] == pytest.approx(0.049152 + 0.01254)


def test_a_crashing_profiler_becomes_an_error_field(monkeypatch, no_ncu):
    def explode(*args, **kwargs):
        raise MemoryError("clang-tidy ran out of memory")

    monkeypatch.setattr(clang_tidy, "run_clang_tidy", explode)
    monkeypatch.setattr(ncu, "collect", explode)
    monkeypatch.setattr(ncu, "ncu_available", lambda: "/usr/local/cuda/bin/ncu")
    fields = profile_record_fields(CLEAN_CPP, "cuda", backend="cuda", ncu_report_path="/nonexistent.ncu-rep")
    _conforms(fields)
    assert "MemoryError" in json.loads(fields["clang_tidy"])["error"]
    assert "MemoryError" in json.loads(fields["ncu_profile"])["error"]
    assert fields["clang_tidy_warnings"] is None


def test_clang_tidy_runs_when_no_result_is_given(no_ncu):
    fields = profile_record_fields((FIXTURES / "known_bugs.cpp").read_text(), "cpp", backend="cpu")
    tidy = json.loads(fields["clang_tidy"])
    assert fields["clang_tidy_warnings"] == tidy["warnings"] >= 2


def test_profiles_round_trip_from_record_fields():
    fields = {"ncu_profile": json.dumps({"error": "x"}), "torch_profile": None, "clang_tidy": "{not json"}
    profiles = profile_pkg.profiles_from_record_fields(fields)
    assert profiles == {
        "ncu": {"error": "x"},
        "torch_profile": {"error": "not profiled"},
        "clang_tidy": {"error": "stored profile is not valid JSON"},
    }
