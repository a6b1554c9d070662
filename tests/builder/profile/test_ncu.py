"""Nsight Compute: argv, the details-CSV parser on a fixture, promotion, and ncu being absent."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from builder import config
from builder.profile import ncu
from builder.profile.ncu_csv import convert, dims, number, parse_details_csv, to_bytes, to_milliseconds

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "profile" / "ncu_details.csv"


@pytest.fixture
def no_ncu_on_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: nothing to find
    assert ncu.ncu_available() is None


@pytest.fixture(scope="module")
def fixture_profile() -> dict:
    return ncu.parse_report(FIXTURE)


def test_argv_never_touches_clocks_and_filters_to_the_candidate_range(tmp_path):
    report = tmp_path / "profile.ncu-rep"
    argv = ncu.ncu_argv(report, ncu="/opt/ncu/ncu")
    assert argv[0] == "/opt/ncu/ncu"
    assert argv[argv.index("--clock-control") + 1] == "none"
    sections = [argv[i + 1] for i, a in enumerate(argv) if a == "--section"]
    assert sections == list(config.NCU_SECTIONS)
    assert argv[argv.index("--launch-count") + 1] == str(config.NCU_LAUNCH_COUNT)
    assert "--nvtx" in argv
    # trailing slash: a push/pop range, the kind torch.cuda.nvtx.range / range_push opens in the child
    assert argv[argv.index("--nvtx-include") + 1] == f"{config.NVTX_CANDIDATE_RANGE}/"
    assert argv[argv.index("--export") + 1] == str(report)


def test_fixture_parses_into_plausible_kernel_entries(fixture_profile):
    assert "error" not in fixture_profile
    own, library = fixture_profile["kernels"]
    assert own["name"].startswith("add_relu_kernel(")
    assert own["grid"] == [65536, 1, 1] and own["block"] == [256, 1, 1]
    assert own["duration_ms"] == pytest.approx(0.049152)  # 49,152 ns
    assert own["sm_pct"] == pytest.approx(12.73)
    assert own["dram_pct"] == pytest.approx(91.42)
    assert own["occupancy_pct"] == pytest.approx(83.61)
    assert own["registers"] == 16
    assert own["shared_mem_bytes"] == 0
    assert own["library"] is False
    assert library["library"] is True
    assert library["duration_ms"] == pytest.approx(0.01254)  # 12.54 us
    assert library["shared_mem_bytes"] == 512 + 2050  # static bytes + dynamic 2.05 Kbyte
    for kernel in fixture_profile["kernels"]:
        assert 0 < kernel["duration_ms"] < 1e3
        for key in ("sm_pct", "dram_pct", "occupancy_pct"):
            assert 0 <= kernel[key] <= 100


def test_fixture_rules_keep_name_type_and_text(fixture_profile):
    rules = fixture_profile["kernels"][0]["rules"]
    assert [(r["name"], r["type"]) for r in rules] == [("SOLBottleneck", "INF"), ("AchievedOccupancy", "OPT")]
    assert rules[1]["text"].startswith("The difference between calculated theoretical")
    assert rules[1]["speedup_pct"] == pytest.approx(16.39)
    assert fixture_profile["kernels"][1]["rules"][0]["type"] == "WRN"


def test_promote_sums_durations_and_weights_by_duration(fixture_profile):
    columns = ncu.promote(fixture_profile)
    d0, d1 = 0.049152, 0.01254
    assert columns["ncu_duration_ms"] == pytest.approx(d0 + d1)
    assert columns["ncu_sm_pct"] == pytest.approx((12.73 * d0 + 5.32 * d1) / (d0 + d1))
    assert columns["ncu_dram_pct"] == pytest.approx((91.42 * d0 + 38.77 * d1) / (d0 + d1))
    assert columns["ncu_occupancy_pct"] == pytest.approx((83.61 * d0 + 11.52 * d1) / (d0 + d1))
    assert columns["ncu_registers"] == 24


def test_promote_of_an_error_or_nothing_is_all_none():
    for profile in ({"error": "x"}, None, {"kernels": []}):
        assert set(ncu.promote(profile).values()) == {None}


def test_promote_skips_missing_values():
    profile = {"kernels": [{"duration_ms": 2.0, "sm_pct": 50.0}, {"duration_ms": 1.0, "sm_pct": None}]}
    columns = ncu.promote(profile)
    assert columns["ncu_duration_ms"] == 3.0
    assert columns["ncu_sm_pct"] == 50.0
    assert columns["ncu_dram_pct"] is None and columns["ncu_registers"] is None


def test_ncu_absent_from_path_gives_the_reason(no_ncu_on_path, tmp_path):
    assert ncu.collect(tmp_path / "never_written.ncu-rep") == {"error": "ncu not found on PATH"}


def test_missing_report_is_an_error(tmp_path, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ncu").write_text("#!/bin/sh\nexit 1\n")
    (fake / "ncu").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake) + os.pathsep + os.environ.get("PATH", ""))
    result = ncu.collect(tmp_path / "r.ncu-rep", returncode=1, stderr_tail="==ERROR== ERR_NVGPUCTRPERM\n")
    assert result["error"].startswith("ncu wrote no report (exit 1)")
    assert "ERR_NVGPUCTRPERM" in result["error"]
    assert "timed out" in ncu.collect(tmp_path / "r.ncu-rep", timed_out=True)["error"]


def test_csv_with_prof_chatter_and_no_kernels():
    text = "==PROF== Connected to process 1\n" + FIXTURE.read_text()
    assert len(parse_details_csv(text)["kernels"]) == 2
    assert "error" in parse_details_csv("==PROF== Disconnected from process 1\n")
    header_only = FIXTURE.read_text().splitlines()[0] + "\n"
    assert "no kernel" in ncu._finish(parse_details_csv(header_only))["error"]


def test_unreadable_report_falls_back_and_reports(no_ncu_on_path, tmp_path, monkeypatch):
    monkeypatch.setattr(ncu, "report_module_dirs", lambda ncu=None: [])
    report = tmp_path / "profile.ncu-rep"
    report.write_bytes(b"not a report")
    assert "ncu not found on PATH" in ncu.parse_report(report)["error"]


def test_unit_helpers():
    assert number("1,410,000,000.50") == pytest.approx(1.4100000005e9)
    assert number("n/a") is None
    assert to_milliseconds(2848.0, "nsecond") == pytest.approx(0.002848)
    assert to_milliseconds(12.5, "usecond") == pytest.approx(0.0125)
    assert to_milliseconds(1.0, "msecond") == 1.0
    assert to_milliseconds(1.0, "cycle") is None
    assert to_bytes(2.0, "Kbyte/block") == 2000 and to_bytes(1.0, "KiB") == 1024
    assert dims("(128, 2, 1)") == [128, 2, 1] and dims("") is None
    assert convert("sm_pct", 3.0, "byte/second") is None  # never read a rate as a percentage
    assert math.isclose(convert("occupancy_pct", 50.0, "%"), 50.0)
