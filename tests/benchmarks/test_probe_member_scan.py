"""The member-scan probe: each way of looking runs over the machine's processes and finds no run of its own."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("probe_member_scan", ROOT / "benchmarks" / "probe_member_scan.py")
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)


def test_every_way_looks_and_finds_no_run(capsys):
    assert all(way() == 0 for way in probe.WAYS.values())
    assert probe.main(["--seconds", "0.3", "--every", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "processes on the machine: median" in out
    assert all(f"{name} " in out for name in probe.WAYS)


def test_a_period_that_is_not_positive_is_a_usage_error():
    with pytest.raises(SystemExit) as stopped:
        probe.main(["--seconds", "0"])
    assert stopped.value.code == 2
