"""bench_explorer.py: --help and bad arguments answer at once; nothing is generated for them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_explorer", ROOT / "benchmarks" / "bench_explorer.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


@pytest.fixture
def nothing_built(monkeypatch):
    def refuse(n):
        raise AssertionError(f"the {n}-kernel archive was generated")

    monkeypatch.setattr(bench, "archive_dir", refuse)
    monkeypatch.setattr(bench, "write_synthetic_archive", refuse)


@pytest.mark.parametrize("argv, code", [(["--help"], 0), (["-h"], 0), (["100", "bogus"], 2), (["0"], 2)])
def test_help_and_bad_arguments_build_nothing(nothing_built, monkeypatch, capsys, argv, code):
    monkeypatch.setattr("sys.argv", ["bench_explorer.py", *argv])
    with pytest.raises(SystemExit) as exit_:
        bench.main()
    assert exit_.value.code == code
    out = capsys.readouterr()
    assert ("usage:" in out.out) if code == 0 else (out.err.count("\n") <= 2 and "error:" in out.err)


def test_arguments_name_the_size_and_the_parts():
    assert bench.parse_args([]) == (100_000, {"queries", "semantic", "browser"})
    assert bench.parse_args(["5000", "browser"]) == (5000, {"browser"})
    assert bench.parse_args(["queries"]) == (100_000, {"queries"})
