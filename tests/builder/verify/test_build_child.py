"""Compile children forked from a build zygote (compile/build_child.py): a real build forked into a sandbox of its own,
writing only its build directory; exec'd children wherever forking is off, impossible or refused."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from builder import config
from builder.verify.compile import build_child, extension
from builder.verify.compile.extension import build_extension
from builder.verify.protocol.entry_points import BUILD_MODULE
from builder.verify.sandbox import bubblewrap, forked
from builder.verify.sandbox.forked import ForkFailed
from builder.verify.sandbox.process import ChildOutcome, SandboxCancelled

ROOT = Path(__file__).resolve().parents[3]
needs_bwrap = pytest.mark.skipif(not bubblewrap.bwrap_usable(), reason="bubblewrap not usable here")

# Its load-time code marks the build directory it was loaded from, and tries a file beside the build cache.
MARKING_SOURCE = """
#include <pybind11/pybind11.h>
#include <dlfcn.h>
#include <fstream>
#include <string>
static int mark() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&mark), &info) && info.dli_fname) {
    std::string path(info.dli_fname);
    std::ofstream(path.substr(0, path.rfind('/')) + "/loaded-here") << "yes";
  }
  std::ofstream("ESCAPE") << "yes";
  return 0;
}
static int marked = mark();
int forward(int x) { return x + 1; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }
"""


def ended() -> ChildOutcome:
    return ChildOutcome(returncode=0, signal=None, timed_out=False, stdout_tail="", stderr_tail="", wall_s=0.1,
                        isolation="bwrap")  # fmt: skip


def no_exec(*args, **kwargs):
    raise AssertionError("the build was exec'd, not forked")


@needs_bwrap
@pytest.mark.slow
def test_a_forked_build_writes_its_build_directory_and_nothing_beside_it(tmp_path, monkeypatch):
    monkeypatch.setattr(build_child, "run_sandboxed", no_exec)
    escape = tmp_path / "escaped"
    with build_child.held_build_zygote({}, None):
        result = build_extension(MARKING_SOURCE.replace("ESCAPE", str(escape)), "cpp", "cpu",
                                 cache_dir=tmp_path / "cache", timeout_s=300)  # fmt: skip
        assert build_child.zygote_is_up({})
    assert result.ok, result.error
    assert (Path(result.library_path).parent / "loaded-here").read_text() == "yes"  # its load-time code ran there
    assert not escape.exists()  # and wrote nothing outside its sandbox
    assert 0 < result.cpu_s < result.compile_s * 4  # its own CPU time, not the zygote's imports
    assert not build_child.zygote_is_up({})  # the stream's end ended the zygote


class Recorder:
    """Stands in for the sandbox: records how a build's child would have been run."""

    def __init__(self) -> None:
        self.exec_d: list[list[str]] = []
        self.forked: list[FakeForked] = []

    def run_sandboxed(self, argv, scratch, timeout_s, **kwargs) -> ChildOutcome:
        self.exec_d.append(list(argv))
        return ended()


class FakeForked:
    def __init__(self, zygote, scratch, gpu, env_extra, extra_binds) -> None:
        self.binds, self.gpu, self.sent, self.killed = list(extra_binds), gpu, [], False

    def send(self, line: str) -> None:
        self.sent.append(line)

    def wait(self, timeout_s, cancel=None) -> ChildOutcome:
        return ended()

    def kill(self) -> None:
        self.killed = True


@pytest.fixture
def recorder(monkeypatch) -> Recorder:
    recorded = Recorder()
    monkeypatch.setattr(build_child, "run_sandboxed", recorded.run_sandboxed)
    monkeypatch.setattr(build_child, "resolve_isolation", lambda isolation: "bwrap")
    monkeypatch.setattr(build_child, "started_zygote", lambda module, env: object())
    monkeypatch.setattr(build_child, "release_zygote", lambda module, env: None)

    def fork(*args, **kwargs) -> FakeForked:
        child = FakeForked(*args, **kwargs)
        recorded.forked.append(child)
        return child

    monkeypatch.setattr(build_child, "ForkedProcess", fork)
    return recorded


def run(tmp_path: Path, cancel: threading.Event | None = None) -> ChildOutcome:
    return build_child.run_build_child(tmp_path / "job.json", tmp_path / "scratch", 60, tmp_path / "build", {}, None,
                                       cancel)  # fmt: skip


def test_a_build_is_forked_with_only_its_build_directory_writable(tmp_path, recorder):
    assert run(tmp_path).returncode == 0
    (child,) = recorder.forked
    assert child.sent == [str(tmp_path / "job.json")] and child.binds == [tmp_path / "build"] and not child.gpu
    assert recorder.exec_d == []


def test_with_forking_off_a_build_is_exec_d(tmp_path, recorder, monkeypatch):
    monkeypatch.setattr(config, "FORK_COMPILE_CHILDREN", False)
    run(tmp_path)
    assert recorder.forked == [] and recorder.exec_d[0][-2:] == [BUILD_MODULE, str(tmp_path / "job.json")]


def test_without_bubblewrap_a_build_is_exec_d(tmp_path, recorder, monkeypatch):
    monkeypatch.setattr(build_child, "resolve_isolation", lambda isolation: "none")
    run(tmp_path)
    assert recorder.forked == [] and len(recorder.exec_d) == 1


def test_a_child_that_cannot_join_its_sandbox_gives_the_zygote_up_and_is_exec_d(tmp_path, recorder, monkeypatch):
    given_up = []

    def refuse(*args, **kwargs):
        raise ForkFailed("could not join the sandbox: no")

    monkeypatch.setattr(build_child, "ForkedProcess", refuse)
    monkeypatch.setattr(build_child, "give_up", lambda zygote, reason: given_up.append(reason))
    assert run(tmp_path).returncode == 0
    assert given_up == ["could not join the sandbox: no"] and len(recorder.exec_d) == 1


def test_a_build_stopped_before_its_start_kills_its_forked_child(tmp_path, recorder):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(SandboxCancelled):
        run(tmp_path, cancel)
    (child,) = recorder.forked
    assert child.killed and child.sent == []


def test_the_stream_holds_the_zygote_from_its_start_to_its_end(monkeypatch):
    calls = []
    monkeypatch.setattr(build_child, "resolve_isolation", lambda isolation: "bwrap")
    monkeypatch.setattr(build_child, "start_zygote_soon", lambda module, env: calls.append(("start", module)))
    monkeypatch.setattr(build_child, "started_zygote", lambda module, env: calls.append(("hold", module)) or object())
    monkeypatch.setattr(build_child, "release_zygote", lambda module, env: calls.append(("release", module)))
    with build_child.held_build_zygote({"CUDA_HOME": "/cuda"}, None):
        assert calls[0] == ("start", BUILD_MODULE)  # begun before the stream's first build is read
        deadline = time.monotonic() + 10
        while len(calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert calls == [("start", BUILD_MODULE), ("hold", BUILD_MODULE)]  # held through the stream
    assert calls[-1] == ("release", BUILD_MODULE)


def test_a_zygote_that_cannot_start_is_not_released(monkeypatch):
    calls = []
    monkeypatch.setattr(build_child, "resolve_isolation", lambda isolation: "bwrap")
    monkeypatch.setattr(build_child, "start_zygote_soon", lambda module, env: None)
    monkeypatch.setattr(build_child, "started_zygote", lambda module, env: None)
    monkeypatch.setattr(build_child, "release_zygote", lambda module, env: calls.append("release"))
    with build_child.held_build_zygote({}, None):
        time.sleep(0.1)
    assert calls == []


def test_compile_children_exec_d_instead_say_so(caplog):
    with caplog.at_level(logging.WARNING):
        forked._exec_d_instead(BUILD_MODULE, "the zygote's imports failed")
    assert "compile children are exec'd, not forked: the zygote's imports failed" in caplog.text


def test_a_stream_that_ends_before_the_zygote_is_up_does_not_wait_and_gives_it_back_once_up(monkeypatch):
    up, calls = threading.Event(), []

    def slow_start(module, env):
        up.wait(10)
        calls.append("hold")
        return object()

    monkeypatch.setattr(build_child, "resolve_isolation", lambda isolation: "bwrap")
    monkeypatch.setattr(build_child, "start_zygote_soon", lambda module, env: None)
    monkeypatch.setattr(build_child, "started_zygote", slow_start)
    monkeypatch.setattr(build_child, "release_zygote", lambda module, env: calls.append("release"))
    with build_child.held_build_zygote({}, None):
        time.sleep(0.1)  # every build was in the cache
    assert calls == []  # ended without waiting for the start
    up.set()
    deadline = time.monotonic() + 10
    while calls != ["hold", "release"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert calls == ["hold", "release"]


@needs_bwrap
def test_a_build_outside_a_stream_starts_no_zygote_and_is_exec_d(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(build_child, "run_sandboxed", lambda argv, *args, **kwargs: calls.append(argv) or ended())
    build_child.run_build_child(tmp_path / "job.json", tmp_path / "scratch", 60, tmp_path / "build", {"K": "v"}, None,
                                None)  # fmt: skip
    assert len(calls) == 1 and calls[0][-1] == str(tmp_path / "job.json")
    assert not build_child.zygote_is_up({"K": "v"})


# --- what a build asks of its child: its priority, and how nvcc runs ------------------------------------------------


@pytest.mark.parametrize("urgent", [True, False])
def test_a_stream_s_later_build_asks_for_the_lower_priority_and_nvcc_in_series(tmp_path, monkeypatch, urgent):
    jobs = []

    def capture(job_path, *args, **kwargs):
        jobs.append(json.loads(Path(job_path).read_text()))
        raise OSError("stopped after the job was written")

    monkeypatch.setattr(extension, "run_build_child", capture)
    build_extension("int forward(int x) { return x; }\n", "cpp", "cpu", cache_dir=tmp_path, urgent=urgent)
    assert jobs[0]["nice"] == (0 if urgent else config.COMPILE_LATER_BUILDS_NICE)
    assert jobs[0]["nvcc_side_by_side"] is urgent
    assert jobs[0]["nvcc_dependency_file"] is (not urgent)  # a side-by-side plan has no step for it
    monkeypatch.setattr(config, "NVCC_FRONT_ENDS_SIDE_BY_SIDE", False)
    build_extension("int forward(int x) { return x + 1; }\n", "cpp", "cpu", cache_dir=tmp_path, urgent=urgent)
    assert jobs[1]["nvcc_side_by_side"] is False
    assert jobs[1]["nvcc_dependency_file"] is True
    monkeypatch.setattr(config, "NVCC_DEPENDENCY_FILE", False)
    build_extension("int forward(int x) { return x + 2; }\n", "cpp", "cpu", cache_dir=tmp_path, urgent=urgent)
    assert jobs[2]["nvcc_dependency_file"] is False


@pytest.mark.parametrize(
    ("side_by_side", "dependency_file", "skipped"),
    [(True, True, True), (False, False, True), (False, True, False)],
)
def test_the_compile_child_skips_torch_s_nvcc_dependency_file_where_its_job_says(
    tmp_path, monkeypatch, side_by_side, dependency_file, skipped
):
    """What the child hands torch's extension builder: its environment as `load` runs (the build itself stopped)."""
    from torch.utils import cpp_extension

    from builder.verify.child import build as build_module

    for name in ("TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES", "PYTORCH_NVCC", "KA_REAL_NVCC", "CXX", "KA_REAL_CXX"):
        # compile_job sets them in this process, as in its own: setenv first, so that the test's end restores each
        # to what it was, absent included (a delenv of an absent name records nothing to restore)
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    seen = []

    def load(**kwargs):
        seen.append(dict(os.environ))
        raise RuntimeError("stopped before the build")

    monkeypatch.setattr(cpp_extension, "load", load)
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(tmp_path / "cuda"))
    job = {"name": "k", "source_path": str(tmp_path / "k.cu"), "build_dir": str(tmp_path), "backend": "cuda",
           "cflags": [], "cuda_cflags": [], "nvcc_side_by_side": side_by_side, "nvcc_dependency_file": dependency_file,
           "nice": 0, "result_path": str(tmp_path / "r.json")}  # fmt: skip
    assert build_module.compile_job(job)["ok"] is False
    assert ("TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES" in seen[0]) is skipped
    assert ("PYTORCH_NVCC" in seen[0]) is side_by_side


def test_the_compile_child_runs_its_compilers_at_the_niceness_its_job_names(tmp_path):
    """The child itself (`child/build.py`), with a host compiler that notes its niceness and fails at once."""
    compiler = tmp_path / "notes-its-niceness"
    compiler.write_text("#!/bin/sh\nawk '{print $19}' /proc/self/stat >> \"$NICE_LOG\"\nexit 1\n")
    compiler.chmod(0o755)
    (tmp_path / "k.cpp").write_text("int forward(int x) { return x; }\n")
    own = os.getpriority(os.PRIO_PROCESS, 0)
    for nice in (0, 7):
        job = {"name": f"k{nice}", "source_path": str(tmp_path / "k.cpp"), "build_dir": str(tmp_path / f"b{nice}"),
               "backend": "cpu", "cflags": [], "cuda_cflags": [], "nvcc_side_by_side": False, "nice": nice,
               "result_path": str(tmp_path / f"r{nice}.json")}  # fmt: skip
        (tmp_path / f"b{nice}").mkdir()
        (tmp_path / f"job{nice}.json").write_text(json.dumps(job))
        log = tmp_path / f"nice{nice}.log"
        env = {**os.environ, "CXX": str(compiler), "NICE_LOG": str(log)}
        subprocess.run([sys.executable, "-m", BUILD_MODULE, str(tmp_path / f"job{nice}.json")], env=env, cwd=ROOT,
                       capture_output=True, timeout=300, check=True)  # fmt: skip
        assert json.loads((tmp_path / f"r{nice}.json").read_text())["ok"] is False  # the compiler failed, as it should
        assert {int(line) for line in log.read_text().split()} == {own + nice}
