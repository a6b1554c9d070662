"""The driver-contention probe's parent side (its workers need a GPU: docs/benchmarks.md)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location(
    "probe_driver_contention", ROOT / "benchmarks" / "probe_driver_contention.py"
)
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)


def test_the_summary_is_each_steps_median_per_gpu_count():
    rows = [{"gpus": 1, "step": "alloc", "wall_s": w, "cpu_s": 0.01} for w in (0.010, 0.030, 0.020)]
    rows += [{"gpus": 2, "step": "alloc", "wall_s": 0.05, "cpu_s": 0.01}, {"gpus": 2, "step": "compute", "wall_s": 0.2,
             "cpu_s": 0.2}]  # fmt: skip
    summary = probe.summary(rows)
    assert summary["1 GPU alloc"] == {"wall_s": 0.020, "cpu_s": 0.01, "wall_p90_s": pytest.approx(0.028), "n": 3}
    assert summary["2 GPUs alloc"]["wall_s"] == 0.05 and "2 GPUs profiler" not in summary
    assert list(summary) == ["1 GPU alloc", "2 GPUs alloc", "2 GPUs compute"]


def test_a_fresh_processs_parts_have_no_cpu_of_their_own_and_are_summarised_after_it():
    rows = [{"gpus": 2, "step": "fresh_context", "wall_s": 2.0, "cpu_s": 0.5},
            {"gpus": 2, "step": "fresh_context.init", "wall_s": 1.5, "cpu_s": None}]  # fmt: skip
    summary = probe.summary(rows)
    assert list(summary) == ["2 GPUs fresh_context", "2 GPUs fresh_context.init"]
    assert summary["2 GPUs fresh_context.init"]["cpu_s"] is None
    assert summary["2 GPUs fresh_context.init"]["wall_s"] == 1.5


def test_a_fresh_processs_parts_split_its_wall_at_its_own_marks(monkeypatch):
    # A stand-in for the CUDA process: the same marks, a known time between them, and the variable it was given.
    source = """
import json, os, time
marks = {"started": time.time()}
time.sleep(0.05)
marks["init_done"] = time.time()
time.sleep(0.02)
marks["alloc_done"] = time.time()
time.sleep(0.03)
marks["first_ops_done"] = time.time()
assert os.environ["PROBE_KNOB"] == "1"
print(json.dumps(marks))
"""
    monkeypatch.setitem(probe.FRESH_SOURCES, "stand-in", source)
    rows = probe.fresh_context_rows("stand-in", {**os.environ, "PROBE_KNOB": "1"})
    parts_in_order = ["start", "init", "alloc", "first_ops", "exit"]
    assert [row["step"] for row in rows] == ["fresh_context"] + [f"fresh_context.{p}" for p in parts_in_order]
    whole, parts = rows[0], {row["step"].split(".")[1]: row["wall_s"] for row in rows[1:]}
    assert whole["cpu_s"] > 0 and all(row["cpu_s"] is None for row in rows[1:])
    assert parts["init"] >= 0.05 and 0.02 <= parts["alloc"] < 0.05 and 0.03 <= parts["first_ops"] < 0.06
    assert sum(parts.values()) == pytest.approx(whole["wall_s"], abs=1e-6)


@pytest.mark.parametrize(
    "argv",
    [
        ["--gpus", "one"],
        ["--gpus", "0"],
        ["--workers", "0"],
        ["--steps", "alloc,nap"],
        ["--steps", ","],
        ["--fresh-env", "NOVALUE"],
        ["--fresh-env", "=1"],
    ],
)
def test_bad_arguments_are_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        probe.main(argv)
    assert exit_.value.code == 2 and "error:" in capsys.readouterr().err


def test_without_a_gpu_the_workers_say_so_and_the_probe_fails(capsys):
    import torch  # a dependency of the project: its absence is a failure, not a skip

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the probe would run")
    assert probe.main(["--gpus", "1", "--workers", "1", "--rounds", "1"]) == 1
    assert "no timings" in capsys.readouterr().err


@pytest.mark.parametrize("primed", [False, True])
def test_the_fresh_torch_process_times_a_profiler_run_and_can_prime_one_first(monkeypatch, primed):
    # The torch process itself, on the CPU: its CUDA calls made no-ops, its tensors on the host.
    source = probe.FRESH_TORCH
    for cuda_call in ("torch.cuda.init()", "torch.cuda.synchronize()"):
        source = source.replace(cuda_call, "None")
    source = source.replace('device="cuda"', 'device="cpu"').replace("ProfilerActivity.CUDA]", "]")
    monkeypatch.setitem(probe.FRESH_SOURCES, "torch on the cpu", source)
    env = {**os.environ, "KA_PROBE_PRIME_PROFILER": "1" if primed else "0"}
    rows = probe.fresh_context_rows("torch on the cpu", env)
    parts = [row["step"].removeprefix("fresh_context.") for row in rows[1:]]
    expected = ["start", "init", "dynamo_import", *(["empty_profiler"] if primed else []), "alloc", "first_ops",
                "ops_again", "profiler", "profiler_again", "exit"]  # fmt: skip
    assert parts == expected
    assert all(row["wall_s"] >= 0 for row in rows)
