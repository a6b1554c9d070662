"""builder.verify.child.main end to end: real child processes evaluating compiled CPU fixtures (one shared
build exporting two candidates as submodules c0/c1, the way the parent batches them) and ModelNew files,
through the parent's protocol: the clean reference child first, then the candidate's child, whose outputs the
parent judges (builder/verify/engine/evaluation.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from builder import config

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures"
CANDIDATES = FIXTURES / "candidates"
SCALE_SHIFT = FIXTURES / "tasks" / "level1" / "1_scale_shift.py"
SHARED_MEMBERS = ("cpu/correct_scale_shift.cpp", "cpu/incorrect_first_row_empty_like.cpp")
SEEDS = [8_675_309_123, 5_551_212_777]
CHILD_TIMEOUT_S = 300


def shared_build_source(paths: list[Path]) -> str:
    """Wrap each candidate in namespace cN and export cN.forward from one module."""
    includes: list[str] = []
    bodies: list[str] = []
    for index, path in enumerate(paths):
        lines = path.read_text().splitlines()
        includes += [line for line in lines if line.startswith("#include") and line not in includes]
        body = [line for line in lines if not line.startswith(("#include", "PYBIND11_MODULE"))]
        bodies.append(f"namespace c{index} {{\n" + "\n".join(body) + "\n}")
    exports = "\n".join(f'    m.def_submodule("c{i}").def("forward", &c{i}::forward);' for i in range(len(paths)))
    return "\n".join(includes + bodies) + f"\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n{exports}\n}}\n"


@pytest.fixture(scope="session")
def shared_cpu_build(tmp_path_factory) -> tuple[str, str]:
    """Compile the shared build once, in a subprocess (this test process never loads candidate code)."""
    build_dir = tmp_path_factory.mktemp("child_shared_build")
    source = build_dir / "shared.cpp"
    source.write_text(shared_build_source([CANDIDATES / p for p in SHARED_MEMBERS]))
    script = (
        "from torch.utils.cpp_extension import load\n"
        f"m = load('ka_child_test_shared', [{str(source)!r}], build_directory={str(build_dir)!r},"
        " extra_cflags=['-O1'])\nprint(m.__file__)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1], "ka_child_test_shared"


TASK = None  # the fixture task, described once


def scale_shift_task():
    from builder.tasks.suite import describe_task_file

    global TASK
    TASK = TASK or describe_task_file(SCALE_SHIFT)
    return TASK


def options(**fields):
    from builder.verify.options import VerifyOptions

    settings = {"backend": "cpu", "seeds": SEEDS, "trials": 2, "timed_calls": 5, "warmup_calls": 1,
                "timing_budget_s": 5.0, "atol": 1e-4, "rtol": 1e-4, "timeout_s": CHILD_TIMEOUT_S}  # fmt: skip
    settings.update(fields)
    return VerifyOptions(**settings)


@pytest.fixture(scope="module")
def clean_reference():
    from builder.verify.engine.clean_reference import ReferenceCache

    references = ReferenceCache()
    reference = references.get(scale_shift_task(), options())
    assert reference.error is None, reference.error
    yield reference
    references.close()


def evaluate(tmp_path: Path, reference, *, library: tuple[str, str, str] | None = None, python: str | None = None,
             pooled=None) -> dict:  # fmt: skip
    """The candidate's child run and judged as the parent does it; the judged result."""
    from builder.candidates import Candidate
    from builder.verify.compile.extension import CompileResult
    from builder.verify.engine.children import build_job
    from builder.verify.engine.evaluation import run_judged

    if python is not None:
        candidate = Candidate(task_id="1/1", source=(CANDIDATES / python).read_text(), language="python",
                              kernel_name="fixture")  # fmt: skip
        compiled = CompileResult(ok=True)
    else:
        candidate = Candidate(task_id="1/1", source="// shared build member", language="cpp", kernel_name="fixture")
        compiled = CompileResult(ok=True, library_path=library[0], module_name=library[1], symbol_prefix=library[2])
    scratch = pooled.scratch if pooled is not None else tmp_path
    job = build_job(scale_shift_task(), candidate, compiled, options(), "evaluate", scratch)
    result, outcome = run_judged(job, scratch, options(), reference, pooled)
    assert result is not None, outcome.stderr_tail[-2000:]
    return result


def make_job(tmp_path: Path, **fields) -> Path:
    job = {"mode": "evaluate", "task_path": str(SCALE_SHIFT), "task_size": "full", "backend": "cpu",
           "language": "python", "seeds": SEEDS, "atol": 1e-4, "rtol": 1e-4, "trials": 2,
           "result_path": str(tmp_path / "result.json")}  # fmt: skip
    job.update(fields)
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    return path


def run_child(job_path: Path) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "builder.verify.child.main", str(job_path)]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)


def read_result(job_path: Path) -> dict:
    return json.loads(Path(json.loads(job_path.read_text())["result_path"]).read_text())


@pytest.mark.slow  # a shared C++ build of the fixtures (~50 s on 2 cores)
def test_compiled_correct_candidate_from_shared_build(tmp_path, shared_cpu_build, clean_reference):
    library, module = shared_cpu_build
    result = evaluate(tmp_path, clean_reference, library=(library, module, "c0."))
    assert result["status"] == "correct", result
    assert result["flags"] == []
    assert result["trials"] == 2
    assert 5 <= result["runtime"]["n"] <= config.TIMING_BLOCKS and result["runtime"]["median_ms"] > 0
    assert "perf_counter" in result["timing_method"] and "on 2 models, each on fresh inputs" in result["timing_method"]
    assert result["own_kernel_fraction"] > 0.5
    assert result["max_diff"] is not None and result["max_diff"] < 1e-5  # judged against the clean reference
    phases = [name for name in result["phase_s"] if not name.startswith("cpu.")]
    # its timing sets were built before its outputs went to the judge
    assert phases.index("prepare_timing") < phases.index("write_outputs") < phases.index("timing")
    # its outputs went to the judge before its second walk over torch's surface (the judge compares meanwhile)
    assert phases.index("write_outputs") < phases.index("fingerprint_after")
    # the checks' time by kind of step, the time yielded to windows not in it
    steps = {name for name in phases if name.startswith("check.")}
    assert {"check.build_trial", "check.call", "check.repeat", "check.census", "check.perturbed",
            "check.probe"} <= steps  # fmt: skip
    assert sum(result["phase_s"][name] for name in steps) <= result["phase_s"]["checks"] + 0.01
    assert (tmp_path / "timed").read_text() == "timed"  # it said when its timed calls were over
    # each phase's CPU seconds beside its wall (the process's, all threads): the start-up paid before the job too
    cpu = {name.removeprefix("cpu."): s for name, s in result["phase_s"].items() if name.startswith("cpu.")}
    assert {"load_task_and_fingerprint", "checks", "prepare_timing", "write_outputs", "timing"} <= set(cpu)
    assert cpu["start_up"] > 0.1 and cpu["checks"] > 0
    assert not any(name.startswith("device_allocs.") for name in phases)  # counted only where CUDA is up
    assert 0 < result["phase_s"]["wait_for_start_up"] < 120  # an exec'd child: the job waited for its imports
    # the collector's time over the job; its full walks skip the imports, frozen when they ended
    assert result["phase_s"]["gc"] >= 0
    assert isinstance(result["phase_s"]["gc_full_collections"], int)


def test_the_jobs_wait_for_the_childs_start_up_is_a_phase_from_the_parents_clock():
    from builder.verify.child.phases import EvaluationPhases

    assert 2.0 <= EvaluationPhases(time.time() - 2.0).seconds["wait_for_start_up"] < 3.0
    assert 0.0 == EvaluationPhases(time.time() + 5.0).seconds["wait_for_start_up"]  # a clock ahead reads as no wait
    assert (
        "wait_for_start_up" not in EvaluationPhases(None).seconds
        and "wait_for_start_up" not in EvaluationPhases("x").seconds
    )


@pytest.mark.slow  # a shared C++ build of the fixtures (~50 s on 2 cores)
def test_compiled_first_row_only_candidate_is_caught(tmp_path, shared_cpu_build, clean_reference):
    library, module = shared_cpu_build
    result = evaluate(tmp_path, clean_reference, library=(library, module, "c1."))
    assert result["status"] == "incorrect"
    # The CPU poison is best effort (it relies on glibc handing the freed NaN blocks back): the unwritten rows show
    # the poison (uninitialized_output) or, when the allocator hands out other memory, differ between identical
    # calls (nondeterministic). Either way caught and flagged; the CUDA fixture's flag stays exact on the GPU.
    assert {"uninitialized_output", "nondeterministic"} & set(result["flags"]), result["flags"]
    assert not result.get("runtime")  # an incorrect candidate is never timed: the parent said stop


@pytest.mark.slow  # a shared C++ build of the fixtures (~50 s on 2 cores)
def test_missing_symbol_is_a_runtime_error(tmp_path, shared_cpu_build, clean_reference):
    library, module = shared_cpu_build
    result = evaluate(tmp_path, clean_reference, library=(library, module, "c7."))
    assert result["status"] == "runtime_error" and "c7" in result["error"]


def test_model_new_in_a_pre_started_child(tmp_path, clean_reference):
    from builder.verify.sandbox.pool import EvalPool

    # No replacement starts while the taken child runs (`refill_after` never set): on a 2-core machine its imports
    # would share the cores with the timing window's few calls, which this test does not measure.
    never = threading.Event()
    with EvalPool(1, gpu=False, env_extra={"CUDA_VISIBLE_DEVICES": ""}, ro_binds=[SCALE_SHIFT.parent],
                  refill_after=never) as pool:  # fmt: skip
        result = evaluate(tmp_path, clean_reference, python="python/correct_uses_torch_ops.py", pooled=pool.take())
    assert result["status"] == "correct", result
    # Its torch ops take a share of a ~50 us call that swings around the census's threshold from run to run
    # (the census itself is tested in test_checks.py); whether it is flagged is not what this test is about.
    assert set(result["flags"]) <= {"uses_torch_ops"}
    # five calls, or more where the accounting of so short a window would flag it (it runs on; referee.py)
    assert result["mode"] == "evaluate" and 5 <= result["runtime"]["n"] <= config.TIMING_BLOCKS
    assert 0 <= result["phase_s"]["wait_for_start_up"] < 120  # taken at once: its imports may still be running


def test_caching_candidate_fails(tmp_path, clean_reference):
    result = evaluate(tmp_path, clean_reference, python="python/incorrect_caches_results.py")
    assert result["status"] == "incorrect"
    # Caught where the allocator first hands it a reused address: a later trial, a perturbed input, or timing.
    assert re.search(r"values outside|reused across calls|ignores_input|nondeterministic", result["error"])


def test_a_rebinding_with_right_outputs_is_named_by_the_fingerprint_after_the_shared_hold(tmp_path, clean_reference):
    """Right outputs, torch.nn.functional.silu rebound at import: the fingerprint names it. The fingerprint's walk
    over torch runs once the checks' outputs are on the host (after `checks_done`: a waiting window need not wait
    for it), so a correct-looking candidate has its timing sets built first, and is then not timed."""
    result = evaluate(tmp_path, clean_reference, python="python/incorrect_tampers_rebinds_unused_function.py")
    assert result["status"] == "incorrect" and "tampers_reference" in result["flags"], result
    assert "torch functions rebound" in result["flag_notes"]["tampers_reference"]
    assert "silu" in result["flag_notes"]["tampers_reference"]
    phases = [name for name in result["phase_s"] if not name.startswith("cpu.")]
    assert phases.index("checks") < phases.index("prepare_timing") < phases.index("fingerprint_after")
    assert "timing" not in phases and (tmp_path / "checks_done").exists()


def test_syntax_error_is_compile_error(tmp_path, clean_reference):
    result = evaluate(tmp_path, clean_reference, python="python/compile_error_syntax.py")
    assert result["status"] == "compile_error" and "SyntaxError" in result["error"]


def test_segfault_leaves_no_result(tmp_path, clean_reference):
    job = make_job(
        tmp_path,
        python_path=str(CANDIDATES / "python/crash_segfault.py"),
        reference=clean_reference.public_manifest(),
        outputs_path=str(tmp_path / "outputs.safetensors"),
    )
    done = run_child(job)
    assert done.returncode != 0  # killed by SIGSEGV: the parent turns the missing result into `crash`
    assert not (tmp_path / "result.json").exists()


def test_unreadable_job_is_one_line_error(tmp_path):
    done = run_child(tmp_path / "missing.json")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "unreadable job" in done.stderr


def test_an_evaluation_without_a_clean_reference_is_refused(tmp_path):
    job = make_job(tmp_path, python_path=str(CANDIDATES / "python/correct_uses_torch_ops.py"))
    assert run_child(job).returncode == 0
    result = read_result(job)
    assert result["status"] == "runtime_error" and result["error_origin"] == "child"
    assert "clean reference" in result["error"]


def test_the_reference_child_writes_outputs_and_a_manifest_without_values(clean_reference):
    manifest = clean_reference.public_manifest()
    assert manifest["output_shapes"] == [[256, 256]] and manifest["output_bytes"] == [256 * 256 * 4]
    assert {f"trial{i}" for i in range(len(SEEDS))} <= clean_reference.outputs.names
    assert "probe" in clean_reference.outputs and "timing0" in clean_reference.outputs
    assert clean_reference.manifest["probe_bit_exact"] is True
    # x, weight and bias all move the reference: the candidate's child runs under each perturbation
    assert [kind for _, kind, _ in manifest["responsive_targets"]] == ["input", "parameter", "parameter"]
    assert "trial0" not in json.dumps(manifest)


@pytest.mark.slow
def test_baseline_mode_times_eager_and_compile(tmp_path):
    job = make_job(tmp_path, mode="baseline", timed_calls=3, warmup_calls=1, timing_budget_s=5.0)
    done = run_child(job)
    assert done.returncode == 0, done.stderr[-2000:]
    result = read_result(job)
    assert result["status"] == "correct"
    assert result["eager_ms"] > 0 and result["eager_runtime"]["n"] == 3
    # torch.compile needs a working C++ toolchain; either it is timed or the reason is recorded.
    assert (result["compile_ms"] or 0) > 0 or result["compile_error"]
    assert result["timing_method"] == result["timing_method"].strip() and "perf_counter" in result["timing_method"]


def test_the_ncu_child_says_ready_before_it_loads_the_candidate_then_ends_its_turn_itself(tmp_path):
    """Nsight Compute's child waits for its turn having run no candidate code (the parent need not stop it
    meanwhile); the candidate loads, warms up and runs its profiled calls after `go`, then `turn_done`."""
    loaded = tmp_path / "loaded"
    candidate = tmp_path / "model_new.py"
    fixture = (CANDIDATES / "python/correct_uses_torch_ops.py").read_text()
    candidate.write_text(f"import pathlib\npathlib.Path({str(loaded)!r}).write_text('1')\n{fixture}")
    ready, go, done = tmp_path / "ready", tmp_path / "go", tmp_path / "turn_done"
    job = make_job(tmp_path, mode="ncu", python_path=str(candidate), ready_path=str(ready), go_path=str(go),
                   turn_done_path=str(done))  # fmt: skip
    child = subprocess.Popen([sys.executable, "-m", "builder.verify.child.main", str(job)], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)
        assert ready.exists() and not loaded.exists() and not done.exists()  # waiting, no candidate code yet
        go.write_text("time")
        _, stderr = child.communicate(timeout=CHILD_TIMEOUT_S)
    finally:
        child.kill()
    assert child.returncode == 0, stderr[-2000:]
    assert loaded.exists() and done.read_text().strip() != ""
    result = read_result(job)
    assert result["status"] == "correct" and result["profiled_calls"] >= 1


def test_a_yield_point_pauses_only_when_asked_and_waits_for_the_resume_word(tmp_path):
    from builder.verify.child.words import YieldPoint

    point = YieldPoint({"pause_path": str(tmp_path / "pause"), "backend": "cpu"})
    point()  # not asked: returns at once, nothing written
    assert not (tmp_path / "paused.1").exists()
    (tmp_path / "pause.1").write_text("pause")
    waiting = threading.Thread(target=point)
    waiting.start()
    deadline = time.monotonic() + 10
    while not (tmp_path / "paused.1").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (tmp_path / "paused.1").exists()
    time.sleep(0.2)
    assert waiting.is_alive()  # no resume word yet
    (tmp_path / "resume.1").write_text("resume")
    waiting.join(10)
    assert not waiting.is_alive()
    assert point.round == 2 and point.waited_s >= 0.2
    point()  # round 2 was not asked for: the old pause.1 does not pause it again
    assert not (tmp_path / "paused.2").exists()


def test_the_checks_offer_a_yield_point_between_every_two_steps(monkeypatch):
    """A waiting window waits for one step of each check in flight: no two candidate calls of different steps
    (a trial's call, its repeat, the census, each perturbed run) without a yield point between them."""
    from builder.tasks import load_task_module
    from builder.tasks.suite import describe_task_file
    from builder.verify.child import checks, reference

    module = load_task_module(describe_task_file(FIXTURES / "tasks" / "level1" / "1_scale_shift.py"))
    job = {"backend": "cpu", "seeds": [11, 22, 33], "trials": 3, "atol": 1e-4, "rtol": 1e-4, "profile": False}
    manifest = reference.compute_reference(module, job).public_manifest()
    events = []

    def candidate(x, w, b):
        events.append("call")
        return x * w + b

    real_census = checks.op_census.census

    def census(call, device):  # one step of several calls (the profiler's warm-up): seen as one
        events.append("census")
        calls_before = len(events)
        try:
            return real_census(call, device)
        finally:
            del events[calls_before:]

    monkeypatch.setattr(checks.op_census, "census", census)
    run = checks.run_candidate_side(candidate, module, job, manifest, between_steps=lambda: events.append("yield"))
    assert run.trials == 3 and run.error is None
    steps = [e for e in events if e != "yield"]
    assert len(steps) == 3 * 2 + 1 + len(manifest["responsive_targets"])  # 3 x (call, repeat), census, perturbed
    assert all(a == "yield" or b == "yield" for a, b in zip(events, events[1:], strict=False))
    assert events[-1] == "yield"  # before the probe
