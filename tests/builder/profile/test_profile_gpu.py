"""GPU checks (run on a GPU box): real ncu and CUDA torch-profiler runs.

They print measured figures (profile seconds per kernel, ncu duration vs CUDA-event median; docs/benchmarks.md
holds the current ones); the assertions only check plausibility, never speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from builder import config
from builder.profile import ncu

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[3]

# The candidate range holds one relu over 16M floats; a sigmoid outside the range must not be profiled.
WORKLOAD = textwrap.dedent(
    """
    import json, sys, torch
    x = torch.randn(1 << 24, device="cuda")
    torch.relu(x); torch.cuda.synchronize()            # warm-up outside the range
    torch.cuda.nvtx.range_push("{range_name}")
    torch.relu(x)
    torch.cuda.nvtx.range_pop()
    torch.sigmoid(x); torch.cuda.synchronize()         # outside the range: must not be profiled
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(50):
        start.record(); torch.relu(x); end.record(); end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    json.dump({{"median_ms": times[len(times) // 2]}}, open(sys.argv[1], "w"))
    """
)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    if ncu.ncu_available() is None:
        pytest.skip("ncu not on PATH")
    work = tmp_path_factory.mktemp("ncu")
    script = work / "workload.py"
    script.write_text(WORKLOAD.format(range_name=config.NVTX_CANDIDATE_RANGE))
    report = work / "profile.ncu-rep"
    timing = work / "timing.json"
    started = time.monotonic()
    proc = subprocess.run(
        [*ncu.ncu_argv(report), sys.executable, str(script), str(timing)],
        capture_output=True,
        text=True,
        timeout=config.NCU_TIMEOUT_S,
    )
    seconds = time.monotonic() - started
    assert report.is_file(), proc.stdout[-2000:] + proc.stderr[-2000:]
    return report, json.loads(timing.read_text()), seconds


def test_ncu_profile_of_a_real_kernel_is_plausible(profiled):
    report, timing, seconds = profiled
    profile = ncu.parse_report(report)
    assert "error" not in profile, profile
    kernels = profile["kernels"]
    assert kernels and not any("sigmoid" in k["name"] for k in kernels), [k["name"] for k in kernels]
    for kernel in kernels:
        assert kernel["duration_ms"] > 0
        assert 0 <= kernel["occupancy_pct"] <= 100
        assert 0 <= kernel["sm_pct"] <= 100 and 0 <= kernel["dram_pct"] <= 100
        assert kernel["registers"] > 0 and kernel["grid"] and kernel["block"]
    columns = ncu.promote(profile)
    print(f"\nreader: {profile['source']}; kernels: {[k['name'][:60] for k in kernels]}")
    print(f"ncu run: {seconds:.1f} s for {len(kernels)} kernel(s) = {seconds / len(kernels):.1f} s per kernel")
    print(f"ncu_duration_ms {columns['ncu_duration_ms']:.4f} vs CUDA-event median {timing['median_ms']:.4f} ms")
    print(json.dumps(columns))


def test_module_reader_and_csv_reader_agree(profiled, monkeypatch):
    report, _, _ = profiled
    if not ncu.report_module_dirs():
        pytest.skip("Nsight Compute's ncu_report module not found")
    started = time.monotonic()
    via_module = ncu.parse_report(report)
    module_s = time.monotonic() - started
    monkeypatch.setattr(ncu, "report_module_dirs", lambda ncu=None: [])
    started = time.monotonic()
    via_csv = ncu.parse_report(report)
    csv_s = time.monotonic() - started
    assert via_module["source"] == "ncu_report" and via_csv["source"] == "csv"
    print(f"\nparse time: ncu_report {module_s:.2f} s, csv {csv_s:.2f} s")
    assert len(via_module["kernels"]) == len(via_csv["kernels"])
    for a, b in zip(via_module["kernels"], via_csv["kernels"], strict=True):
        print(
            json.dumps(
                {"module": {k: a.get(k) for k in a if k != "rules"}, "csv": {k: b.get(k) for k in b if k != "rules"}}
            )
        )
        assert a["duration_ms"] == pytest.approx(b["duration_ms"], rel=0.01)
        assert a["occupancy_pct"] == pytest.approx(b["occupancy_pct"], abs=0.1)
        assert a["registers"] == b["registers"]
        print(f"rules: module {len(a['rules'])}, csv {len(b['rules'])}")


def test_torch_profile_on_cuda_counts_library_kernels():
    import torch

    from builder.profile.torch_profile import profile_call

    x = torch.randn(1 << 20, device="cuda")
    result = profile_call(lambda: torch.relu(x) + 1, "cuda")
    assert "error" not in result, result
    assert result["kernels"] and all(k["library"] for k in result["kernels"])
    assert result["own_fraction"] == 0.0 and result["own_fraction_basis"] == "device_time"
    assert result["totals"]["device_us"] > 0


def test_engine_ncu_duration_vs_verifier_median():
    """A bundled CUDA candidate through the verification engine with profile=True."""
    if ncu.ncu_available() is None:
        pytest.skip("ncu not on PATH")
    from builder.candidates import Candidate
    from builder.tasks import resolve_task
    from builder.verify.engine.verifier import verify
    from builder.verify.options import VerifyOptions

    source = REPO / "data" / "candidates" / "cuda" / "level1" / "1_square_matmul" / "smem_tiled.cu"
    if not source.is_file():
        pytest.skip(f"{source} missing")
    task = resolve_task("1/1")
    candidate = Candidate.from_file(source, task_id=task.id)
    started = time.monotonic()
    record = verify(candidate, task, VerifyOptions(backend="cuda", profile=True))
    seconds = time.monotonic() - started
    profile = json.loads(record.ncu_profile)
    print(f"\nstatus {record.status}; verify+profile {seconds:.1f} s; ncu: {str(profile)[:300]}")
    print(f"ncu_duration_ms {record.ncu_duration_ms} vs verifier median runtime_ms {record.runtime_ms}")
    from builder.verify.engine.device_gate import device_gate

    owned = device_gate("cuda", 0).snapshot().by_purpose
    print(f"device owned: {json.dumps({k: round(v, 2) for k, v in owned.items()})} s")
    assert record.status == "correct"
    assert "error" not in profile, profile
    assert 0 < owned.get("ncu", 0.0) < seconds  # the ncu child's turn came (its range), and ended
    assert record.ncu_duration_ms > 0 and 0 <= record.ncu_occupancy_pct <= 100
