"""probe_build_fork.py: a compile child's two ways (exec'd or forked, nvcc in series or side by side), through the
builder's own build."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks.probe_build_fork import ROOT
from builder.verify.sandbox import bubblewrap

PROBE = str(ROOT / "benchmarks/probe_build_fork.py")


def test_a_missing_candidate_is_a_usage_error():
    run = subprocess.run([sys.executable, PROBE, "--candidate", "/nonexistent.cu"], capture_output=True, text=True,
                         cwd=ROOT)  # fmt: skip
    assert run.returncode == 2 and run.stderr.strip() == "no such candidate: /nonexistent.cu"


@pytest.mark.parametrize("vary", ["nvcc", "depfile"])
def test_what_nvcc_does_is_a_cuda_probe(vary):
    run = subprocess.run([sys.executable, PROBE, "--vary", vary, "--backend", "cpu"], capture_output=True, text=True,
                         cwd=ROOT)  # fmt: skip
    assert run.returncode == 2
    assert run.stderr.strip() == f"--vary {vary}: on the cuda backend (a CPU build runs no nvcc)"


@pytest.mark.slow
@pytest.mark.skipif(not bubblewrap.bwrap_usable(), reason="bubblewrap not usable here")
def test_one_build_each_way_on_the_cpu(tmp_path):
    fixture = ROOT / "tests/fixtures/sandbox/add_one.cpp"
    run = subprocess.run([sys.executable, PROBE, "--backend", "cpu", "--candidate", str(fixture), "--builds", "1",
                          "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "build-fork.json").read_text())
    assert [row["way"] for row in report["builds"]] == ["exec'd", "forked"]
    assert all(row["cpu_s"] > 0 for row in report["builds"])
    assert set(report["medians"]) == {"exec'd", "forked"}
