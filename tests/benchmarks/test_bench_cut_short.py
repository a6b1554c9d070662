"""The throughput bench under a time limit: SIGTERM (what `timeout` sends) ends the stream in progress, and the
bench still prints its figures, counting the records made so far."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_a_run_cut_short_by_sigterm_reports_what_it_measured(tmp_path):
    bench = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "bench_verify_throughput.py"), "--backend", "cpu", "--kernels",
         "2", "--tasks", "2", "--skip", "startup,compile", "--records", str(tmp_path / "records.jsonl")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines = []
    assert bench.stdout is not None
    for line in bench.stdout:  # the stream has started once its header is out: its first builds are running
        lines.append(line)
        if "kernels over" in line:
            break
    time.sleep(2.0)
    began = time.monotonic()
    bench.send_signal(signal.SIGTERM)
    rest, _ = bench.communicate(timeout=120)
    output = "".join(lines) + rest
    assert bench.returncode == 0, output
    assert "cut short after 0 of 2 records" in output, output
    assert "VERIFIED KERNELS/HOUR" in output  # the figures, for the records made
    assert time.monotonic() - began < 60  # the builds in flight were stopped, not waited for


@pytest.mark.parametrize("option, values", [("--device-reserve", ("2G", "-1", "0,x")),
                                            ("--device-connections", ("0", "default,-1", "eight")),
                                            ("--warm-repeat", ("0", "-2", "two")),
                                            ("--first-batch", ("0", "-1", "one")),
                                            ("--later-builds-nice", ("-1", "20", "ten")),
                                            ("--kernelbench", ("-1", "all"))])  # fmt: skip
def test_bad_warm_run_settings_are_a_usage_error(option, values):
    for value in values:
        done = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "bench_verify_throughput.py"), "--backend", "cpu",
             option, value], cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2 and option in done.stderr, (value, done.stderr[-500:])
