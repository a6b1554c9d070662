"""The engine with the real child on a GPU (marked gpu: skipped without one)."""

from __future__ import annotations

import time
from dataclasses import replace

import psutil
import pytest

from builder import config
from builder.candidates import Candidate
from builder.generate.bundled import read_task_folder
from builder.tasks import load_suite
from builder.verify.compile.extension import CompileResult
from builder.verify.engine.children import build_job, child_env, run_child
from builder.verify.engine.verifier import Verifier, VerifyOptions, verify
from builder.verify.sandbox.pool import EvalPool

pytestmark = pytest.mark.gpu
BUNDLED = config.CANDIDATES_DIR / "cuda" / "level1" / "1_square_matmul"


@pytest.fixture
def options(tmp_path):
    return VerifyOptions(backend="cuda", baseline_cache_dir=tmp_path / "baselines", build_cache_dir=tmp_path / "builds",
                         timeout_s=300)  # fmt: skip


def bundled(name: str) -> Candidate:
    return Candidate.from_file(BUNDLED / name, "1/1", generator="bundled")


def test_real_cuda_candidate_end_to_end(options):
    task = load_suite().get("1/1")
    record = verify(bundled("smem_tiled.cu"), task, options)
    assert record.status == "correct", record.error
    assert record.runtime_ms > 0 and record.eager_ms > 0 and record.speedup_eager is not None
    assert record.gpu_name and record.compute_capability and record.nvcc_version
    print(f"\nsmem_tiled: {record.runtime_ms:.3f} ms, eager {record.eager_ms:.3f} ms, {record.speedup_eager:.2f}x")


def test_pool_start_up_overlaps_the_running_candidate(options):
    """The replacement child starts (imports torch, inits CUDA) while the taken child evaluates."""
    task = load_suite().get("1/1")
    options = replace(options, trials=2).with_seeds()
    with EvalPool(1, gpu=True, env_extra=child_env(options)) as pool:
        time.sleep(5)  # let the first child finish its start-up
        first = pool.take()
        sent = time.time()
        job = build_job(task, Candidate(task_id="1/1", source="", language="python", kernel_name="none"),
                        CompileResult(ok=True), options, "baseline", first.scratch)  # fmt: skip
        _, outcome = run_child(job, first.scratch, options, 600, pooled=first)
        finished = time.time()
        waiting = pool._ready[0]
        replacement_started = psutil.Process(waiting.process.pid).create_time()
        assert sent - 1.0 <= replacement_started < finished
        print(f"\npooled job ran {outcome.wall_s:.2f} s after hand-over; replacement started "
              f"{replacement_started - sent:+.2f} s after it")  # fmt: skip


def test_stream_over_bundled_candidates_meets_their_designed_verdicts(options):
    task = load_suite().get("1/1")
    pairs = [(entry.candidate(), task) for entry in read_task_folder(BUNDLED, "cuda")]
    started = time.monotonic()
    records = list(Verifier(options).stream(pairs))
    print(f"\n{len(records)} bundled candidates streamed in {time.monotonic() - started:.1f} s")
    designed = {c.kernel_name: c.designed_verdict for c, _ in pairs}
    wrong = {r.kernel_name: (r.status, designed.get(r.kernel_name), r.error) for r in records
             if r.status != designed.get(r.kernel_name)}  # fmt: skip
    assert not wrong and len(records) == len(designed), wrong
