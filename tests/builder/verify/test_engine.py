"""The engine's parent side against a trusted fake child (tests/fixtures/sandbox/fake_child.py).

The fake keeps to the job/result contract of docs/architecture.md; its behaviour comes from a
`# FAKE: {...}` line in a Python candidate, so these tests compile nothing.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from builder import config
from builder.candidates import Candidate
from builder.tasks import load_suite
from builder.verify.compile import extension as compile_module
from builder.verify.compile.extension import CompileResult
from builder.verify.engine import stages
from builder.verify.engine.baseline_cache import BaselineCache
from builder.verify.engine.children import build_job, child_env, run_child
from builder.verify.engine.verifier import Verifier, evaluate_compiled, verify
from builder.verify.judge import verdict
from builder.verify.options import VerifyOptions
from builder.verify.sandbox.pool import EvalPool
from schemas import validate

FAKE_CHILD = "tests.fixtures.sandbox.fake_child"


@pytest.fixture(scope="module")
def task():
    return load_suite().get("1/1")


@pytest.fixture
def options(tmp_path):
    return VerifyOptions(
        backend="cpu",
        timeout_s=30,
        child_module=FAKE_CHILD,
        baseline_cache_dir=tmp_path / "baselines",
        build_cache_dir=tmp_path / "builds",
        trials=5,
    )


def candidate(task, directive: dict | None = None, name: str = "fake") -> Candidate:
    body = f"# FAKE: {json.dumps(directive)}\n" if directive is not None else ""
    return Candidate(task_id=task.id, source=f"{body}class ModelNew: pass  # {name}\n", language="python",
                     kernel_name=name)  # fmt: skip


def fake_children() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if FAKE_CHILD in " ".join(p.info["cmdline"] or [])]


def test_correct_candidate_gets_a_full_valid_record(task, options):
    record = verify(candidate(task, {"status": "correct", "median_ms": 2.0}), task, options)
    assert record.status == "correct" and record.flags == [] and record.ranking_eligible
    assert validate(record) == []
    assert record.task_id == "1/1" and record.op_name == "square_matmul" and record.language == "python"
    assert record.reference_module_code == task.source and "def module_fn" in record.reference_functional_code
    assert record.runtime_ms == 2.0 and 0 < record.runtime_n <= options.timed_calls  # the referee may stop early
    assert record.eager_ms is not None and record.speedup_eager == pytest.approx(record.eager_ms / 2.0)
    assert record.speedup_compile == pytest.approx(record.compile_ms / 2.0)
    assert (record.atol, record.rtol) == task.tolerances()
    assert len(record.seeds) == 5 and len(set(record.seeds)) == 5
    assert record.isolation in ("bwrap", "process") and record.eval_s > 0
    assert record.torch_version and record.gpu_name and record.created_at


def test_a_child_that_hashed_its_outputs_on_the_host_is_said_once_and_changes_no_verdict(task, options, caplog):
    """The digest's host fallback gives the same digests, so the same record; only the log says it (once a
    process): its windows run several times as long."""
    from builder.verify.engine import one_kernel

    one_kernel._say_digests_on_the_host.cache_clear()
    on_host = {"status": "correct", "median_ms": 2.0, "phase_s": {"digest_on_device": 0.0}}
    with caplog.at_level(logging.WARNING, logger="builder.verify.engine.verifier"):
        records = [verify(candidate(task, on_host, name=f"on_host{n}"), task, options) for n in range(2)]
        on_device = verify(candidate(task, dict(on_host, phase_s={"digest_on_device": 1.0}), name="dev"), task, options)
    assert [r.status for r in records + [on_device]] == ["correct"] * 3 and not records[0].flags
    said = [r for r in caplog.records if "hashed its outputs on the host" in r.getMessage()]
    assert len(said) == 1
    one_kernel._say_digests_on_the_host.cache_clear()


def test_seeds_are_secret_per_build_unless_given(task, options):
    first = verify(candidate(task), task, options)
    second = verify(candidate(task), task, options)
    assert first.seeds != second.seeds
    given = verify(candidate(task), task, replace(options, seeds=[1, 2, 3]))
    assert given.seeds == [1, 2, 3] and given.trials == 3


def test_disqualifying_flag_makes_correct_incorrect(task, options):
    record = verify(candidate(task, {"status": "correct", "flags": ["input_mutation"]}), task, options)
    assert record.status == "incorrect" and record.flags == ["input_mutation"] and not record.ranking_eligible


def test_non_disqualifying_flag_keeps_status_but_not_ranking(task, options):
    record = verify(candidate(task, {"status": "correct", "flags": ["degenerate_task", "made_up_flag"]}), task,
                    options)  # fmt: skip
    assert record.status == "correct" and record.flags == ["degenerate_task"] and not record.ranking_eligible


def test_suspicious_speedup_over_eager(task, options):
    # The fake's eager baseline is 1-2 ms; a 0.01 ms kernel is > 10x faster.
    record = verify(candidate(task, {"status": "correct", "median_ms": 0.01}), task, options)
    assert record.speedup_eager > config.SUSPICIOUS_SPEEDUP and "suspicious_speedup" in record.flags
    assert record.status == "correct" and not record.ranking_eligible


def test_the_parent_judges_outputs_whatever_the_child_claims(task, options):
    # The child claims correct with a tiny max_diff; its outputs file says otherwise (2.0 where the clean
    # reference has 1.0). The record follows the parent's comparison.
    record = verify(candidate(task, {"status": "correct", "max_diff": 1e-9, "wrong_output": True}), task, options)
    assert record.status == "incorrect" and record.max_diff == 1.0 and "outside atol" in record.error
    assert record.eager_ms is None and record.runtime_ms is None  # baselines and timing only for correct kernels


def test_the_speedup_uses_eager_timed_in_the_window_and_records_the_clean_one(task, options):
    # The fake's clean eager is 1-2 ms, another figure on every run: the window's 1.1 ms is never held above it.
    record = verify(candidate(task, {"median_ms": 2.0, "eager_window_ms": 1.1}), task, options)
    assert record.status == "correct"
    assert record.eager_ms == 1.1 and record.speedup_eager == pytest.approx(0.55)
    assert record.speedup_eager_iqr == pytest.approx(0.0, abs=1e-9)  # the referee's per-block ratios, all alike
    assert record.eager_clean_ms is not None and record.eager_clean_ms != record.eager_ms


def test_an_eager_window_above_the_clean_one_is_held_to_it_on_the_cpu(task, options):
    # A median of 2.5 ms in the window: above any clean eager of the fake's (1-2 ms) by more than 10 %. Its fastest
    # call, 1.0 ms, is not slowed, so the slowed rule (median and fastest alike) never takes it, whatever the clean one.
    record = verify(candidate(task, {"median_ms": 2.0, "eager_window_ms": 2.5, "eager_window_min_ms": 1.0}), task,
                    options)  # fmt: skip
    assert record.status == "correct" and record.eager_clean_ms is not None
    assert record.eager_ms == pytest.approx(record.eager_clean_ms * (1 + config.EAGER_CROSSCHECK_TOLERANCE))
    assert record.speedup_eager == pytest.approx(record.eager_ms / 2.0)
    assert config.EAGER_HELD_CLAUSE in record.timing_method


def test_on_the_cpu_an_eager_slowed_in_the_window_leaves_the_speedup_to_the_clean_one(task, options):
    record = verify(candidate(task, {"median_ms": 2.0, "eager_window_ms": 50.0}), task, options)
    assert record.status == "correct" and "slowed_baseline" not in record.flags
    assert record.eager_ms == record.eager_clean_ms and record.speedup_eager < 1.0
    assert "speedup against a clean process's eager, not this window's" in record.timing_method


@pytest.mark.slow  # several real streams (~15-20 s)
def test_a_cached_baseline_far_from_the_window_is_measured_again_once(task, options):
    options = options.with_seeds()
    baselines = BaselineCache(options.baseline_cache_dir)
    cached = baselines.get(task, options)["eager_ms"]  # the fake's eager: 1-2 ms, different on every run

    def evaluate(name: str):
        slow_window = candidate(task, {"eager_window_ms": 1000.0}, name=name)
        return evaluate_compiled(CompileResult(ok=True), slow_window, task, options, baselines=baselines)

    first, second = evaluate("a"), evaluate("b")
    assert first.eager_clean_ms != cached  # 1000 ms in the window against ~1 ms cached: measured again...
    assert second.eager_clean_ms == first.eager_clean_ms  # ...once per task in a build


def test_segfault_is_a_crash_with_signal_and_stderr(task, options):
    record = verify(candidate(task, {"do": "segfault"}), task, options)
    assert record.status == "crash" and "SIGSEGV" in record.error and "about to crash" in record.error
    assert validate(record) == []


@pytest.mark.parametrize("action, expected", [("no_result", "exit code 3"), ("garbage", "exit code 0")])
def test_missing_or_unreadable_result_is_a_crash(task, options, action, expected):
    record = verify(candidate(task, {"do": action}), task, options)
    assert record.status == "crash" and expected in record.error


def test_hang_is_a_timeout_and_leaves_no_process(task, options):
    started = time.monotonic()
    record = verify(candidate(task, {"do": "hang"}), task, replace(options, timeout_s=2))
    assert record.status == "timeout" and "timed out" in record.error
    assert time.monotonic() - started < 30
    assert fake_children() == []


def test_unknown_status_from_the_child_is_a_crash(task, options):
    record = verify(candidate(task, {"status": "totally_fine"}), task, options)
    assert record.status == "crash" and "unknown status" in record.error


def test_compile_failures_become_records_without_running_anything(task, options):
    cand = candidate(task, name="cpp-like")
    failed = evaluate_compiled(CompileResult(ok=False, error="x.cpp:3: error: boom"), cand, task, options)
    assert failed.status == "compile_error" and "boom" in failed.error and failed.eval_s is None
    timed_out = evaluate_compiled(CompileResult(ok=False, timed_out=True, error="compile timed out after 1 s"), cand,
                                  task, options)  # fmt: skip
    assert timed_out.status == "timeout" and "compile" in timed_out.error


def test_baselines_are_measured_once_per_task_and_cached(task, options):
    options = options.with_seeds()
    baselines = BaselineCache(options.baseline_cache_dir)
    first, second = (evaluate_compiled(CompileResult(ok=True), candidate(task, {"status": "correct"}, name), task,
                                       options, baselines=baselines) for name in ("a", "b"))  # fmt: skip
    # The fake reports a different eager time on every run: equal values mean one measurement in a build (measured
    # again at most once, where the window's eager disagreed with it).
    assert first.eager_clean_ms == second.eager_clean_ms is not None
    assert len(list(options.baseline_cache_dir.glob("*.json"))) == 1
    assert BaselineCache(options.baseline_cache_dir).get(task, options)["eager_ms"] == first.eager_clean_ms
    other_backend_key = BaselineCache(options.baseline_cache_dir).key(task, replace(options, backend="cuda"))
    assert other_backend_key != BaselineCache(options.baseline_cache_dir).key(task, options)


def test_child_sees_the_job_contract(task, options, tmp_path):
    options = options.with_seeds()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    job = build_job(task, candidate(task), CompileResult(ok=True), options, "evaluate", scratch)
    result, outcome = run_child(job, scratch, options, 30)
    assert outcome.returncode == 0, outcome.stderr_tail
    assert result["seeds_seen"] == options.seeds and job["task_size"] == "cpu" and job["symbol"] == "forward"
    assert "HOME" in result["env_seen"] and child_env(options) == {"CUDA_VISIBLE_DEVICES": ""}


def test_pool_prestarts_the_next_child_while_one_runs(task, options, tmp_path):
    with EvalPool(1, gpu=False, env_extra=child_env(options), child_module=FAKE_CHILD) as pool:
        first = pool.take()
        assert pool.started_count == 2  # the replacement started as soon as the first was taken
        job = build_job(task, candidate(task), CompileResult(ok=True), options.with_seeds(), "evaluate",
                        first.scratch)  # fmt: skip
        result, outcome = run_child(job, first.scratch, options, 30, pooled=first)
        assert outcome.returncode == 0 and result["status"] == "correct"
        second = pool.take()
        # The second child was started before the first one received its job: start-up overlapped.
        assert psutil.Process(second.process.pid).create_time() <= result["started_at"] + 0.5
        second.discard()
    assert fake_children() == []


def test_a_pooled_childs_timeout_counts_from_the_end_of_its_start_up(task, options):
    # A job handed to a pre-started child still starting (3 s here: torch's import on a small or busy box) gets its
    # whole timeout (1 s) once the child has started; a job that runs past its timeout still times out.
    env = {**child_env(options), "KA_FAKE_CHILD_START_S": "3"}
    with EvalPool(1, gpu=False, env_extra=env, child_module=FAKE_CHILD) as pool:
        for directive, times_out in (({"status": "correct"}, False), ({"do": "hang"}, True)):
            child = pool.take()
            job = build_job(task, candidate(task, directive), CompileResult(ok=True), options.with_seeds(), "evaluate",
                            child.scratch)  # fmt: skip
            result, outcome = run_child(job, child.scratch, options, 1.0, pooled=child)
            assert outcome.timed_out is times_out, outcome.stderr_tail
            assert times_out or result["status"] == "correct"
    assert fake_children() == []


def test_stream_verifies_every_pair_and_cleans_up(task, options):
    verifier = Verifier(replace(options, prestart=1))
    pairs = [(candidate(task, {"status": "correct"}, f"k{i}"), task) for i in range(3)]
    pairs.append((candidate(task, {"status": "incorrect", "max_diff": 1.0}, "bad"), task))
    records = list(verifier.stream(pairs))
    assert sorted(r.kernel_name for r in records) == ["bad", "k0", "k1", "k2"]
    assert {r.kernel_name: r.status for r in records}["bad"] == "incorrect"
    assert len({tuple(r.seeds) for r in records}) == 1  # one secret draw per build
    time.sleep(0.2)
    assert fake_children() == []


PAIR_REQUEST_S = 0.5  # an engine's request for its next pair, answered by the builder's process


def test_a_tasks_reference_and_baseline_start_at_its_first_pair_not_at_its_windows_end(task, options, monkeypatch):
    """An engine's input comes a pair a request (a window of them took 1.3-3.0 s on two H200s), and the first
    evaluations wait for the task's clean reference: it starts as soon as the task's first pair is read, before the
    next pair comes (the input here comes at an engine's pace)."""
    other = load_suite().get("1/2")
    read, started = [], {}
    monkeypatch.setattr(BaselineCache, "prewarm", lambda self, t, *a, **k: started.setdefault(t.id, len(read)))

    def pairs():
        for i, pair_task in enumerate([task, task, other, task]):
            time.sleep(PAIR_REQUEST_S)
            read.append(i)
            yield candidate(pair_task, {"status": "incorrect", "max_diff": 1.0}, f"k{i}"), pair_task

    records = list(Verifier(replace(options, batch_size=4, compile_workers=1)).stream(pairs()))
    assert len(records) == 4
    assert started == {task.id: 1, other.id: 3}  # each at its first pair, in a window of four


def test_verdict_helpers():
    assert verdict.final_status("correct", {"side_stream"}) == "incorrect"
    assert verdict.final_status("crash", {"side_stream"}) == "crash"
    assert verdict.ranking_eligible("correct", set()) and not verdict.ranking_eligible("correct", {"degenerate_task"})
    assert verdict.bounded("x" * 100_000).endswith("[...]") and len(verdict.bounded("x" * 100_000)) <= 8192
    assert verdict.speedup(4.0, 2.0) == 2.0 and verdict.speedup(None, 2.0) is None


def test_profile_hook_fills_profile_fields_and_tolerates_failures(task, options, monkeypatch):
    import sys
    import types

    from builder.verify.engine.profiling import attach_profiles

    cand = Candidate(task_id=task.id, source="int forward();", language="cpp", kernel_name="tidy")
    record = verify(candidate(task, {"status": "correct"}), task, options)
    calls = []

    def fake_fields(source, language, *, backend, torch_profile=None, arch=None, **ncu):
        calls.append((source, language, backend, ncu))
        return {"clang_tidy": json.dumps({"warnings": 2}), "clang_tidy_warnings": 2, "torch_own_fraction": None,
                "ncu_profile": json.dumps({"error": "ncu profiles the CUDA backend only"})}  # fmt: skip

    package = types.ModuleType("builder.profile")
    package.profile_record_fields = fake_fields
    monkeypatch.setitem(sys.modules, "builder.profile", package)
    profiled = attach_profiles(replace(record), cand, task, replace(options, profile=True), CompileResult(ok=True))
    assert calls == [("int forward();", "cpp", "cpu", {})]  # no ncu run on the cpu backend
    assert profiled.clang_tidy_warnings == 2 and json.loads(profiled.clang_tidy) == {"warnings": 2}
    assert profiled.torch_own_fraction == record.torch_own_fraction == 1.0  # the child's value is kept

    def broken(*args, **kwargs):
        raise RuntimeError("profiler exploded")

    package.profile_record_fields = broken
    failed = attach_profiles(replace(record), cand, task, replace(options, profile=True), CompileResult(ok=True))
    assert "profiler exploded" in json.loads(failed.clang_tidy)["error"] and failed.status == "correct"
    untouched = attach_profiles(replace(record), cand, task, options, CompileResult(ok=True))
    assert untouched.clang_tidy is None and len(calls) == 1


def test_stream_abandoned_early_leaves_no_process(task, options):
    pairs = [(candidate(task, {"status": "incorrect"}, f"k{i}"), task) for i in range(6)]
    stream = Verifier(replace(options, prestart=2, batch_size=2, compile_workers=1)).stream(pairs)
    first = next(stream)
    stream.close()  # the consumer stops: pre-started children must go with the stream
    assert first.status == "incorrect"
    deadline = time.monotonic() + 20
    while fake_children() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert fake_children() == []


def test_a_prestarted_child_that_died_is_replaced_by_a_fresh_one(task, options):
    with EvalPool(1, gpu=False, env_extra=child_env(options), child_module=FAKE_CHILD) as pool:
        dead = pool.take()
        dead.process.kill()  # as if its start-up (imports, CUDA init) had failed
        job = build_job(task, candidate(task), CompileResult(ok=True), options.with_seeds(), "evaluate", dead.scratch)
        result, outcome = run_child(job, dead.scratch, options, 30, pooled=dead)
        assert outcome.returncode == 0 and result["status"] == "correct"
        dead.discard()


def _pool_arguments(monkeypatch, position: int, keyword: str) -> list:
    """What each EvalPool the engine makes is given at `position` (or as `keyword`), in order."""

    given = []

    class SpiedPool(EvalPool):
        def __init__(self, *args, **kwargs) -> None:
            given.append(args[position] if len(args) > position else kwargs.get(keyword))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(stages, "EvalPool", SpiedPool)
    return given


def test_the_options_say_whether_a_streams_evaluation_children_are_forked(task, options, monkeypatch):
    """Options, not only the config: a stream over several GPUs runs in engine processes with their own config."""
    asked = _pool_arguments(monkeypatch, 6, "fork")
    for fork in (False, None):
        records = list(Verifier(replace(options, fork_children=fork)).stream([(candidate(task), task)]))
        assert [r.status for r in records] == ["correct"]
    assert asked == [False, None]  # None: the config's


def test_the_options_say_whether_a_pools_replacements_wait_for_the_first_reference(task, options, monkeypatch):
    given = _pool_arguments(monkeypatch, 7, "refill_after")
    monkeypatch.setattr(config, "EVAL_REFILL_AFTER_FIRST_REFERENCE", True)
    for wait in (False, None, True):
        verifier = Verifier(replace(options, refill_after_first_reference=wait))
        records = list(verifier.stream([(candidate(task), task)]))
        assert [r.status for r in records] == ["correct"]
        assert (given[-1] is verifier.references.first_ended) == (wait is not False)
        assert verifier.references.first_ended.is_set()  # the one candidate's reference ended


def test_a_record_waiting_for_its_tasks_baseline_does_not_hold_up_the_worker(task, options, monkeypatch):
    """One evaluation worker: while the correct kernel's record waits for the task's baseline (being measured
    elsewhere), the worker evaluates the next candidate, whose record comes out first; every record comes out."""
    released = threading.Event()
    real_get = BaselineCache.get

    def slow_get(self, *args, **kwargs):
        assert released.wait(30), "the baseline was never released"
        return real_get(self, *args, **kwargs)

    monkeypatch.setattr(BaselineCache, "get", slow_get)
    pairs = [(candidate(task, {"status": "correct"}, "waits"), task),
             (candidate(task, {"status": "incorrect", "max_diff": 1.0}, "next"), task)]  # fmt: skip
    stream = Verifier(replace(options, eval_workers=1)).stream(pairs)
    first = next(stream)
    assert first.kernel_name == "next" and first.status == "incorrect"
    released.set()
    rest = list(stream)
    assert [r.kernel_name for r in rest] == ["waits"] and rest[0].status == "correct"
    assert rest[0].speedup_compile is not None  # the baseline it waited for is in it


def numbered_cpp_pairs(task, count: int) -> list:
    """`count` distinct C++ candidates for fake builds, which read each one's `// kernel N` line."""
    kernel = (Path(__file__).resolve().parents[2] / "fixtures" / "sandbox" / "add_one.cpp").read_text()
    return [(Candidate(task_id=task.id, source=f"{kernel}// kernel {i}\n", language="cpp", kernel_name=f"k{i}"), task)
            for i in range(count)]  # fmt: skip


def kernel_numbers(source: str) -> set[int]:
    return {int(n) for n in re.findall(r"// kernel (\d+)", source)}


def test_a_build_that_raises_ends_the_stream_with_its_error(task, options, monkeypatch):
    """The builder's own failure in a shared build (not a compile error: the build machinery raising) reaches the
    stream's caller, which stores nothing for the pairs it held, rather than being lost in a window's thread."""

    def broken_build(self, source: str, language: str, tries=None, urgent=False) -> CompileResult:
        raise RuntimeError("the build machinery broke")

    monkeypatch.setattr(stages.CompileStage, "_build", broken_build)
    outcome: dict[str, object] = {}

    def consume() -> None:
        try:
            outcome["records"] = list(Verifier(options).stream(numbered_cpp_pairs(task, 3)))
        except RuntimeError as exc:
            outcome["error"] = str(exc)

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    thread.join(timeout=120)
    assert outcome == {"error": "the build machinery broke"}


def test_the_next_windows_builds_start_while_the_last_window_still_builds(task, options, monkeypatch):
    """A window's straggler (a long build, here failing and rebuilt) must not leave the other compile workers, and
    so the device, idle: the next window's builds take them meanwhile, each window's own builds first."""
    spans: list[tuple[set[int], float, float]] = []
    lock = threading.Lock()

    def fake_build(self, source: str, language: str, tries=None, urgent=False) -> CompileResult:
        members = kernel_numbers(source)
        began = time.monotonic()
        time.sleep(1.5 if 0 in members else 0.05)  # kernel 0's builds are long
        with lock:
            spans.append((members, began, time.monotonic()))
        return CompileResult(ok=False, error="fake.cpp: error: no compiler here")

    monkeypatch.setattr(stages.CompileStage, "_build", fake_build)
    streamed = replace(options, batch_size=2, first_batch_size=2, compile_workers=2)
    records = list(Verifier(streamed).stream(numbered_cpp_pairs(task, 12)))
    assert sorted(r.kernel_name for r in records) == sorted(f"k{i}" for i in range(12))  # none lost, none twice
    straggler_ends = [end for members, _, end in spans if 0 in members]
    second_window = [began for members, began, _ in spans if members & {4, 5, 6, 7}]
    assert len(straggler_ends) == 2  # kernels 0 and 1 together, then kernel 0 alone
    assert min(second_window) < straggler_ends[0]  # the idle worker went on to the next window
    # Two windows at most building at once: the third starts once the first or the second has ended (the first
    # usually still builds then, but a loaded machine can end it first).
    first_window_end = max(end for members, _, end in spans if members & {0, 1, 2, 3})
    second_window_end = max(end for members, _, end in spans if members & {4, 5, 6, 7})
    third_window = [began for members, began, _ in spans if members & {8, 9, 10, 11}]
    assert min(third_window) >= min(first_window_end, second_window_end)


@pytest.mark.slow  # several real streams (~15-20 s)
def test_a_stream_batched_otherwise_builds_none_of_the_last_streams_candidates_again(task, options, monkeypatch):
    """A resumed or re-sized run batches the same candidates into other shared builds (other sources, other keys):
    each candidate is found in the build it had, and nothing is built twice."""
    builds: list[set[int]] = []
    lock = threading.Lock()

    def fake_build(self, source: str, language: str, tries=None, urgent=False) -> CompileResult:
        key = compile_module.build_key(source, "cpu")  # where a real build of it would be cached
        build_dir = self.options.build_cache_dir / "builds" / key[:32]
        build_dir.mkdir(parents=True, exist_ok=True)
        (build_dir / "lib.so").write_bytes(b"")
        (build_dir / compile_module.RESULT_FILE).write_text(
            json.dumps({"ok": True, "library_path": str(build_dir / "lib.so")})
        )
        with lock:
            builds.append(kernel_numbers(source))
        return CompileResult(ok=True, library_path=str(build_dir / "lib.so"), cache_key=key)

    monkeypatch.setattr(stages.CompileStage, "_build", fake_build)
    pairs = numbered_cpp_pairs(task, 12)
    first = list(Verifier(replace(options, batch_size=4, compile_workers=2)).stream(pairs))
    assert len(first) == 12 and set().union(*builds) == set(range(12)) and max(map(len, builds)) > 1
    builds.clear()
    again = list(
        Verifier(replace(options, batch_size=3, compile_workers=1)).stream(
            pairs[::-1] + numbered_cpp_pairs(task, 13)[12:]
        )
    )
    assert builds == [{12}]  # only the new candidate
    assert sorted(r.kernel_name for r in again) == sorted(f"k{i}" for i in range(13))


def test_a_streams_first_builds_ramp_up_and_later_ones_share_the_workers(task, options, monkeypatch):
    """No compiler: a fake build notes which candidates each shared build holds, and fails (so nothing runs)."""
    builds: list[set[int]] = []
    lock = threading.Lock()

    def fake_build(self, source: str, language: str, tries=None, urgent=False) -> CompileResult:
        with lock:
            builds.append(kernel_numbers(source))
        return CompileResult(ok=False, error="fake.cpp: error: no compiler here")

    monkeypatch.setattr(stages.CompileStage, "_build", fake_build)
    streamed = replace(options, batch_size=4, first_batch_size=2, compile_workers=2)
    records = list(Verifier(streamed).stream(numbered_cpp_pairs(task, 20)))
    assert sorted(r.kernel_name for r in records) == sorted(f"k{i}" for i in range(20))
    assert {r.status for r in records} == {"compile_error"}
    seen: set[int] = set()
    first_builds = []  # each candidate's first build, before the failed ones were bisected
    for members in builds:
        if not members & seen:
            first_builds.append(sorted(members))
        seen |= members
    # windows of 4 x 2 workers: the first ramps 2, 4 (then the 2 left); the second 4, 4; the last 4 share 2 workers
    assert [len(m) for m in sorted(first_builds)] == [2, 4, 2, 4, 4, 2, 2]
