"""The engine's stream with the real child, a real CPU extension build and the real sandbox (slow: one C++
build). Guards what the fake child cannot: a pre-started child must see a library compiled after it started."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder import config
from builder.candidates import Candidate
from builder.tasks import load_suite
from builder.verify.engine.verifier import BaselineCache, Verifier, VerifyOptions
from builder.verify.sandbox.pool import EvalPool
from builder.verify.sandbox.process import resolve_isolation

FIXTURES = config.REPO_ROOT / "tests" / "fixtures"
FAKE_CHILD = "tests.fixtures.sandbox.fake_child"


def test_pool_does_not_claim_a_directory_that_appeared_after_its_children(tmp_path):
    if Path("/tmp") not in tmp_path.parents:
        pytest.skip("needs the pytest tmp dir under /tmp (the sandbox's private /tmp is the point)")
    later, existing = tmp_path / "builds", tmp_path / "tasks"
    existing.mkdir()
    with EvalPool(1, gpu=False, child_module=FAKE_CHILD, ro_binds=[later, existing]) as pool:
        later.mkdir()
        (later / "ka_0.so").write_bytes(b"")
        # The waiting child was sandboxed before `later` existed: it cannot see the library, so the engine
        # must start a fresh child (which binds the library itself) instead of handing the job over.
        assert not pool.covers([later / "ka_0.so"])
        assert pool.covers([existing / "task.py"])


@pytest.mark.slow
def test_stream_loads_a_library_built_after_the_pool_started(tmp_path):
    """The whole path on a fresh build cache. On an H200 the first candidate of such a stream failed with
    `cannot open shared object file` under bubblewrap (runtime_error for a correct kernel): whether the pool
    starts before the first build creates the cache is a race, so the pool test above is the deterministic
    guard and this one checks the real child, build and sandbox together."""
    task = load_suite(FIXTURES / "tasks").get("1/1")
    source = (FIXTURES / "candidates" / "cpu" / "correct_scale_shift.cpp").read_text()
    pairs = [(Candidate(task_id="1/1", source=source, language="cpp", kernel_name="scale_shift"), task)]
    options = VerifyOptions(backend="cpu", build_cache_dir=tmp_path / "not" / "yet" / "builds",
                            baseline_cache_dir=tmp_path / "baselines", timeout_s=120, trials=2)  # fmt: skip
    records = list(Verifier(options).stream(pairs))
    assert [(r.status, r.error) for r in records] == [("correct", None)]
    assert records[0].isolation == resolve_isolation()


@pytest.mark.slow
def test_a_baseline_is_built_without_inductors_worker_pool(tmp_path, monkeypatch):
    """The real baseline child, torch.compile included: inductor builds with the configured compile threads
    (one: no pool of worker processes per baseline child), and the record of the baseline says so."""
    task = load_suite(FIXTURES / "tasks").get("1/1")
    options = VerifyOptions(backend="cpu", baseline_cache_dir=tmp_path / "baselines", timeout_s=300, trials=2)
    baseline = BaselineCache(options.baseline_cache_dir).get(task, options)
    assert baseline is not None and baseline["compile_error"] is None and baseline["compile_ms"] > 0
    assert baseline["compile_threads"] == config.BASELINE_COMPILE_THREADS == 1
    monkeypatch.setattr(config, "BASELINE_COMPILE_THREADS", 2)
    other = BaselineCache(tmp_path / "other").get(task, options)
    assert other is not None and other["compile_threads"] == 2
