"""clang-tidy: real runs of the wheel's binary on fixtures with known bugs at known places."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.profile import clang_tidy
from builder.profile.clang_tidy import normalise_arch, parse_diagnostics, run_clang_tidy

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "profile"


def _at(result: dict, line: int, check: str) -> list[dict]:
    return [d for d in result["diagnostics"] if d["line"] == line and d["check"] == check]


@pytest.fixture(scope="module")
def known_bugs() -> dict:
    return run_clang_tidy((FIXTURES / "known_bugs.cpp").read_text(), "cpp")


def test_use_after_move_found_at_its_line_and_column(known_bugs):
    hits = _at(known_bugs, 11, "bugprone-use-after-move")
    assert len(hits) == 1
    assert hits[0]["column"] == 17
    assert hits[0]["severity"] == "warning"
    assert "'values' used after it was moved" in hits[0]["message"]


def test_copied_parameters_found(known_bugs):
    assert [d["column"] for d in _at(known_bugs, 6, "performance-unnecessary-value-param")] == [40]
    assert [d["column"] for d in _at(known_bugs, 14, "performance-unnecessary-value-param")] == [47]


def test_counts_match_diagnostics(known_bugs):
    assert known_bugs["mode"] == "c++"
    assert known_bugs["errors"] == 0 and known_bugs["header_errors"] == 0
    assert known_bugs["warnings"] == sum(1 for d in known_bugs["diagnostics"] if d["severity"] == "warning")
    assert known_bugs["counts"] == {"warning": known_bugs["warnings"]}
    # nothing outside the candidate file and nothing on the clean lines
    assert {d["line"] for d in known_bugs["diagnostics"]} == {6, 11, 14}


@pytest.mark.slow  # clang-tidy through torch's headers (~40 s)
def test_cpp_mode_with_torch_headers():
    """The realistic case: a CPU extension including <torch/extension.h> (slowest test here, ~25 s)."""
    # a generous limit: torch headers take ~25 CPU s, and a loaded CI machine may stretch the wall time
    result = run_clang_tidy((FIXTURES / "torch_candidate.cpp").read_text(), "cpp", timeout_s=900)
    assert "error" not in result, result
    assert result["errors"] == 0 and result["header_errors"] == 0, result["diagnostics"]
    assert [d["column"] for d in _at(result, 12, "bugprone-use-after-move")] == [38]
    print(f"clang-tidy with torch headers, C++ mode: {result['seconds']} s")


@pytest.mark.skipif(clang_tidy.cuda_toolkit_root() is None, reason="no CUDA toolkit headers on this machine")
def test_cuda_mode_finds_bug_in_cu_file():
    result = run_clang_tidy((FIXTURES / "kernel_bugs.cu").read_text(), "cuda", arch="9.0")
    assert result["mode"] == "cuda" and result["arch"] == "sm_90"
    assert result["errors"] == 0 and result["header_errors"] == 0, result
    assert [d["column"] for d in _at(result, 12, "bugprone-use-after-move")] == [27]


@pytest.mark.slow  # clang-tidy through torch's headers (~40 s)
@pytest.mark.skipif(clang_tidy.cuda_toolkit_root() is None, reason="no CUDA toolkit headers on this machine")
def test_cuda_mode_parses_a_torch_extension_candidate_completely():
    # A real candidate: torch/extension.h pulls c10/cuda headers, which a CPU build of torch cannot satisfy alone.
    source = next((REPO / "data" / "candidates" / "cuda" / "level1" / "19_relu").glob("*.cu")).read_text()
    result = run_clang_tidy(source, "cuda", arch="9.0")
    assert result["mode"] == "cuda" and result["errors"] == 0 and result["header_errors"] == 0, result
    cpu_torch = not any(
        (Path(d) / clang_tidy.TORCH_CUDA_CONFIG_HEADER).is_file() for d in clang_tidy.torch_include_dirs()
    )
    assert any("stand-in" in note and "cuda_cmake_macros" in note for note in result["notes"]) == cpu_torch


def test_cuda_reduced_mode_without_toolkit(monkeypatch):
    monkeypatch.setattr(clang_tidy, "cuda_toolkit_root", lambda: None)
    result = run_clang_tidy((FIXTURES / "kernel_bugs.cu").read_text(), "cuda")
    assert result["mode"] == "cuda-reduced"
    assert any("reduced mode" in note for note in result["notes"])
    assert [d["column"] for d in _at(result, 12, "bugprone-use-after-move")] == [27]


def test_compile_failing_candidate_still_gets_diagnostics():
    source = (FIXTURES / "known_bugs.cpp").read_text() + "\nint broken( { return 0; }\n"
    result = run_clang_tidy(source, "cpp")
    assert result["errors"] >= 1
    assert any(d["severity"] == "error" and d["line"] == 16 for d in result["diagnostics"])
    assert _at(result, 11, "bugprone-use-after-move"), "warnings before the syntax error are kept"
    assert result["warnings"] == sum(1 for d in result["diagnostics"] if d["severity"] == "warning")


def test_unknown_header_is_an_error_not_a_warning():
    result = run_clang_tidy('#include "no_such_header_anywhere.h"\nint f() { return 1; }\n', "cpp")
    assert result["warnings"] == 0
    assert result["errors"] == 1
    assert result["diagnostics"][0]["line"] == 1 and "not found" in result["diagnostics"][0]["message"]


def test_timeout_is_reported_not_raised():
    result = run_clang_tidy((FIXTURES / "known_bugs.cpp").read_text(), "cpp", timeout_s=0.001)
    assert "timed out" in result["error"]


def test_missing_binary_and_python_candidates(monkeypatch):
    assert "python" in run_clang_tidy("class ModelNew: pass", "python")["error"]
    monkeypatch.setattr(clang_tidy, "clang_tidy_binary", lambda: None)
    assert "not found" in run_clang_tidy("int f();", "cpp")["error"]


def test_parse_diagnostics_keeps_only_the_candidate_file(tmp_path):
    source = str(tmp_path / "candidate.cu")
    output = "\n".join(
        [
            f"{source}:3:5: warning: something odd [bugprone-foo]",
            f"{source}:3:5: note: context for the warning above",
            "/usr/include/x.h:10:1: error: unknown type name 'T' [clang-diagnostic-error]",
            f"{source}:7:1: error: expected ';' after expression [clang-diagnostic-error]",
            "Suppressed 3 warnings (3 in non-user code).",
        ]
    )
    parsed = parse_diagnostics(output, source)
    assert [(d["line"], d["severity"], d["check"]) for d in parsed["diagnostics"]] == [
        (3, "warning", "bugprone-foo"),
        (7, "error", "clang-diagnostic-error"),
    ]
    assert parsed["counts"] == {"warning": 1, "error": 1}
    assert parsed["header_errors"] == 1


def test_normalise_arch():
    assert [normalise_arch(a) for a in ("9.0", "90", "sm90", "sm_90a", None, "10.0")] == [
        "sm_90",
        "sm_90",
        "sm_90",
        "sm_90a",
        "sm_90",
        "sm_100",
    ]
