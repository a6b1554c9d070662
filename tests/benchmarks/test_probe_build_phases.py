"""probe_build_phases.py's readers: nvcc's --time report and the host compiler's flags from a build's ninja file."""

from __future__ import annotations

import subprocess
import sys

from benchmarks.probe_build_phases import ROOT, host_command, nvcc_phases

# The header nvcc 13.0 writes, and rows of its shape (times made up).
TIME_CSV = """source file name , phase name , phase input files , phase output file , arch , tool, metric , unit
k.cu , gcc (preprocessing 1) , k.cu  , k.cpp1.ii , compute_90a , nvcc , 2500.5 , ms
k.cu , gcc (preprocessing 4) , k.cu  , k.cpp4.ii ,  , nvcc , 1500.0 , ms
k.cu , cicc ,  k.cpp1.ii  , k.ptx , compute_90a , nvcc , 14.25 , s
k.cu , ptxas , k.ptx  , k.cubin , sm_90a , nvcc , 120000 , us
k.cu , gcc (compiling) ,   , k.cuda.o , compute_90a , nvcc , 18000 , ms
k.cu , gcc (compiling) ,   , k.cuda.o , compute_90a , nvcc , 1000 , ms
 , nvcc (driver) ,  , k.cuda.o ,  , nvcc , not-a-number , ms
"""


def test_nvcc_phases_reads_each_phase_in_seconds_and_adds_repeats(tmp_path):
    path = tmp_path / "time.csv"
    path.write_text(TIME_CSV)
    phases = nvcc_phases(path)
    assert phases == {
        "gcc (preprocessing 1)": 2.5005,
        "gcc (preprocessing 4)": 1.5,
        "cicc": 14.25,
        "ptxas": 0.12,
        "gcc (compiling)": 19.0,
    }
    assert nvcc_phases(tmp_path / "missing.csv") == {}


def test_host_command_takes_the_builds_cflags_and_post_cflags(tmp_path):
    (tmp_path / "build.ninja").write_text(
        "ninja_required_version = 1.3\ncxx = c++\ncflags = -DTORCH_EXTENSION_NAME=x -isystem /torch/include -fPIC\n"
        "post_cflags = -O3 -std=c++17\ncuda_cflags = -O3\n"
    )
    assert host_command(tmp_path) == [
        "c++", "-DTORCH_EXTENSION_NAME=x", "-isystem", "/torch/include", "-fPIC", "-O3", "-std=c++17"
    ]  # fmt: skip


def test_a_missing_candidate_is_a_usage_error():
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks/probe_build_phases.py"), "--candidate", "/nonexistent.cu"],
                         capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert run.returncode == 2 and run.stderr.strip() == "no such candidate: /nonexistent.cu"
