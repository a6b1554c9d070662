"""The builder's own failures told apart from the candidate's: suspected from what a child leaves, confirmed by the
control kernel, never recorded nor cached; the preflight before the first candidate."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from builder import config
from builder.candidates import Candidate
from builder.errors import ExitCode, InfrastructureError
from builder.tasks import load_suite
from builder.verify import environment
from builder.verify.compile import extension as compile
from builder.verify.compile.extension import CompileResult, build_extension, recall_build
from builder.verify.engine import clean_reference, infrastructure, preflight
from builder.verify.engine.infrastructure import InfrastructureFailure
from builder.verify.engine.verifier import evaluate_compiled, verify
from builder.verify.options import VerifyOptions
from builder.verify.sandbox.process import ChildOutcome
from builder.verify.sandbox.suspects import child_suspect, compile_suspect, suspect_text

FAKE_CHILD = "tests.fixtures.sandbox.fake_child"
BWRAP_LINE = "bwrap: execvp /tmp/ka-clone/.venv/bin/python: No such file or directory"
# A compiler that answers torch's questions (its version) and is killed as it compiles, as the OOM killer does.
KILLED_AS_IT_COMPILES = '#!/bin/sh\ncase " $* " in *" -c "*) kill -KILL $$;; esac\nexec /usr/bin/c++ "$@"\n'
GOOD_CPP = config.INFRA_CONTROL_FILES["cpu"].read_text()


def outcome(stderr: str = "", returncode: int | None = 1, sig: int | None = None, timed_out: bool = False):
    return ChildOutcome(returncode=returncode, signal=sig, timed_out=timed_out, stdout_tail="", stderr_tail=stderr,
                        wall_s=0.5, isolation="bwrap")  # fmt: skip


@pytest.mark.parametrize(
    "text, what",
    [
        (BWRAP_LINE, "the sandbox did not start"),
        ("/usr/bin/python: No module named builder.verify.child.build", "cannot import the builder"),
        ("OSError: [Errno 28] No space left on device: 'x.o'", "no space left"),
        ("c++: fatal error: Killed signal terminated program cc1plus", "killed by a signal"),
        ("nvcc error   : 'cicc' died due to signal 9 (Kill signal)", "killed by a signal"),
        ("ka-compiler: c++ killed by signal 9", "killed by a signal"),
        ("RuntimeError: Ninja is required to load C++ extensions", "missing"),
        ("RuntimeError: CUDA error: no CUDA-capable device is detected", "CUDA context"),
        ("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable", "CUDA context"),
        ("Unable to determine the device handle for GPU0000:1B:00.0: GPU is lost.", "device was lost"),
    ],
)
def test_texts_that_name_the_machinery(text, what):
    assert what in suspect_text(f"Traceback (most recent call last):\n{text}\n")


@pytest.mark.parametrize("text", ["x.cpp:3:5: error: 'y' was not declared in this scope",
                                  "RuntimeError: CUDA error: an illegal memory access was encountered",
                                  "Segmentation fault", "", None])  # fmt: skip
def test_texts_of_the_candidates_own_failures(text):
    assert suspect_text(text) is None


def test_a_compile_child_that_wrote_nothing_never_started_and_one_killed_was_killed():
    assert "the sandbox did not start" in compile_suspect(outcome(BWRAP_LINE), None)
    assert "did not start" in compile_suspect(outcome("something else"), None)
    assert "SIGKILL" in compile_suspect(outcome(returncode=-9, sig=signal.SIGKILL), {"provisional": True})
    # Started, then ended at the module's load (the candidate's static initialiser): its own crash.
    assert compile_suspect(outcome("Segmentation fault", returncode=-11, sig=11), {"provisional": True}) is None
    assert compile_suspect(outcome(timed_out=True), None) is None
    assert compile_suspect(outcome(), {"ok": False, "error": "x.cpp:1: error: nope"}) is None


def test_an_evaluation_child_that_never_started_or_lost_its_device_is_suspect():
    assert "the sandbox did not start" in child_suspect(outcome(BWRAP_LINE), None)
    assert child_suspect(outcome("about to crash", returncode=-11, sig=11), None) is None
    assert "CUDA context" in child_suspect(outcome(), {"status": "runtime_error",
                                                        "error": "CUDA error: initialization error"})  # fmt: skip
    assert child_suspect(outcome(), {"status": "incorrect", "error": "CUDA error: initialization error"}) is None


@pytest.fixture
def build_cache():
    # Not under /tmp: a fake compiler's folder must be what the sandbox sees, whatever it shows of /tmp.
    root = Path(tempfile.mkdtemp(dir=Path.home() / ".cache", prefix="ka-infra-test-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_a_compiler_killed_as_it_compiles_is_the_machinerys_and_nothing_is_cached(build_cache, monkeypatch):
    fake = build_cache / "bin"
    fake.mkdir()
    (fake / "c++").write_text(KILLED_AS_IT_COMPILES)
    (fake / "c++").chmod(0o755 | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    environment.toolchain.cache_clear()
    try:
        result = build_extension(GOOD_CPP, "cpp", "cpu", cache_dir=build_cache, timeout_s=300)
        assert not result.ok and "the compiler was killed by a signal" in result.infrastructure
        assert "ka-compiler: c++ killed by signal 9" in result.infrastructure
        assert (build_cache / "builds").is_dir() and not list(build_cache.rglob(compile.RESULT_FILE))
        assert recall_build(GOOD_CPP, "cpp", "cpu", cache_dir=build_cache) is None
    finally:
        monkeypatch.undo()
        environment.toolchain.cache_clear()


def test_a_cached_failure_that_names_the_machinery_is_not_read_back(tmp_path):
    """The failures an earlier builder cached (`compiler process ended without a result ... bwrap: execvp`) are
    never a source's own: rebuilt, not recalled. (A failure stands only for the build of the source as written.)"""
    key = compile._keyed(GOOD_CPP, "cpu", False, 0)[0]
    entry = tmp_path / "builds" / key[:32]
    entry.mkdir(parents=True)
    error = f"compiler process ended without a result (exit code 1): {BWRAP_LINE}"
    (entry / compile.RESULT_FILE).write_text(json.dumps({"ok": False, "error": error}))
    assert recall_build(GOOD_CPP, "cpp", "cpu", cache_dir=tmp_path) is None
    (entry / compile.RESULT_FILE).write_text(json.dumps({"ok": False, "error": "x.cpp:1:1: error: nope"}))
    assert recall_build(GOOD_CPP, "cpp", "cpu", cache_dir=tmp_path).error == "x.cpp:1:1: error: nope"


def test_the_build_cache_key_names_the_toolchain(monkeypatch):
    before = compile.build_key(GOOD_CPP, "cpu")
    monkeypatch.setattr(environment, "toolchain", lambda backend: {"cxx": "/opt/other/g++", "cxx_version": "13"})
    assert compile.build_key(GOOD_CPP, "cpu") != before


# --- the engine: a confirmed failure of the machinery is no record ------------------------------------------


@pytest.fixture
def task():
    return load_suite().get("1/1")


@pytest.fixture
def options(tmp_path):
    return VerifyOptions(backend="cpu", timeout_s=30, child_module=FAKE_CHILD, trials=2,
                         baseline_cache_dir=tmp_path / "baselines", build_cache_dir=tmp_path / "builds")  # fmt: skip


@pytest.fixture
def control(monkeypatch):
    """The control kernel's answer, set by the test (None: it passes); its runs counted."""
    state = {"answer": "the control kernel (naive.cpp on task 1/19) did not compile: fake", "runs": 0}

    def run_control(options, fresh):
        state["runs"] += 1
        return state["answer"]

    monkeypatch.setattr(preflight, "run_control", run_control)
    monkeypatch.setattr(preflight, "_checks", {})
    return state


def fake_candidate(task, directive: dict) -> Candidate:
    return Candidate(task_id=task.id, source=f"# FAKE: {json.dumps(directive)}\nclass ModelNew: pass\n",
                     language="python", kernel_name="fake")  # fmt: skip


def test_a_child_whose_sandbox_did_not_start_is_no_record_when_the_control_fails_too(task, options, control):
    cand = fake_candidate(task, {"do": "no_result", "stderr": BWRAP_LINE})
    with pytest.raises(InfrastructureError) as caught:
        verify(cand, task, options)
    assert caught.value.exit_code == ExitCode.INFRASTRUCTURE
    assert "the sandbox did not start" in str(caught.value) and "control kernel" in str(caught.value)
    assert control["runs"] == 1


@pytest.fixture
def evaluations(monkeypatch):
    """The evaluation children run, counted; `first` replaces the first one's outcome where the test sets it."""
    from builder.verify.engine import one_kernel

    state = {"runs": 0, "first": None}
    real = one_kernel.run_judged

    def counted(job, scratch, options, reference, pooled=None):
        state["runs"] += 1
        if state["runs"] == 1 and state["first"] is not None:
            return state["first"]
        return real(job, scratch, options, reference, pooled)

    monkeypatch.setattr(one_kernel, "run_judged", counted)
    return state


def test_a_candidate_that_only_says_the_sandbox_failed_gets_its_own_crash(task, options, control, evaluations):
    control["answer"] = None  # the control passes: the machinery works, the candidate printed the line
    record = verify(fake_candidate(task, {"do": "no_result", "stderr": BWRAP_LINE}), task, options)
    assert record.status == "crash" and "bwrap: execvp" in record.error and control["runs"] == 1
    assert evaluations["runs"] == 2  # evaluated once more; the second look's crash is its own


def test_a_disk_full_for_a_while_is_not_the_candidates_failure(task, options, control, evaluations):
    """Other children's files filled the disk, then went: the control passes by the time it is asked, and the
    candidate, evaluated once more, gets the verdict it earns."""
    control["answer"] = None
    full = "SafetensorError: Error while serializing: I/O error: No space left on device (os error 28)"
    evaluations["first"] = (
        {"status": "runtime_error", "error": full, "flags": []},
        ChildOutcome(0, None, False, "", "", 1.0, "process"),
    )
    record = verify(fake_candidate(task, {"status": "correct"}), task, options)
    assert record.status == "correct" and evaluations["runs"] == 2 and control["runs"] == 1


def test_a_compile_the_machinery_failed_is_no_record_and_one_it_did_not_is_built_again(task, options, control,
                                                                                         monkeypatch):  # fmt: skip
    cand = replace(fake_candidate(task, {}), language="cpp", source=GOOD_CPP)
    failed = CompileResult(ok=False, error="compiler process ended", infrastructure="the sandbox did not start: x")
    result = evaluate_compiled(failed, cand, task, options)
    assert isinstance(result, InfrastructureFailure) and result.kernel_id == cand.kernel_id
    assert "the sandbox did not start" in result.reason
    control["answer"], rebuilt = None, []
    from builder.verify.engine import one_kernel

    def compile_again(candidate, task, options):
        rebuilt.append(options.suspects_are_own)
        return CompileResult(ok=False, error="x.cpp:1:1: error: its own")

    monkeypatch.setattr(one_kernel, "compile_candidate", compile_again)
    record = evaluate_compiled(failed, cand, task, options)
    assert record.status == "compile_error" and record.error == "x.cpp:1:1: error: its own" and rebuilt == [True]


def test_many_suspects_at_once_cost_one_control(options, control):
    began = preflight.time.monotonic()
    first = infrastructure.machinery_fails("the sandbox did not start: x", options, began, preflight.confirm)
    again = infrastructure.machinery_fails("the sandbox did not start: y", options, began, preflight.confirm)
    assert first and again and control["runs"] == 1
    infrastructure.machinery_fails(
        "the sandbox did not start: z", options, preflight.time.monotonic() + 1, preflight.confirm
    )
    assert control["runs"] == 2


def test_a_reference_whose_child_did_not_start_is_not_kept(task, options, monkeypatch):
    runs = []

    def failing(task, options, directory, cancel=None):
        runs.append(1)
        return clean_reference.CleanReference(error=f"the reference child ended without a result; {BWRAP_LINE}")

    monkeypatch.setattr(clean_reference, "compute_clean_reference", failing)
    cache = clean_reference.ReferenceCache()
    cache.get(task, options.with_seeds())
    cache.get(task, options.with_seeds())
    assert len(runs) == 2


# --- the preflight ----------------------------------------------------------------------------------------


def test_preflight_stops_with_one_line_and_remembers_only_a_pass(options, control, monkeypatch, tmp_path):
    monkeypatch.setattr(config, "CACHE_DIR", tmp_path / "cache")
    with pytest.raises(InfrastructureError, match=r"^preflight failed, nothing was verified or stored: the control"):
        preflight.preflight(options)
    assert not (tmp_path / "cache" / config.PREFLIGHT_CACHE_SUBDIR).exists()
    control["answer"] = None
    preflight.preflight(options)
    preflight.preflight(options)
    assert control["runs"] == 2  # the failure, then one pass that the next preflight believes


def test_the_control_kernel_is_a_known_good_bundled_candidate():
    for backend in ("cpu", "cuda"):
        candidate, task = preflight.control_pair(backend)
        assert task.id == "1/19" and "forward" in candidate.source


@pytest.mark.gpu
@pytest.mark.parametrize("fresh", [False, True], ids=["preflight", "confirm"])
def test_the_cuda_control_kernel_passes_on_a_working_gpu_box(tmp_path, fresh):
    options = VerifyOptions(backend="cuda", build_cache_dir=tmp_path / "builds", baseline_cache_dir=tmp_path / "b")
    assert preflight.run_control(options, fresh=fresh) is None
