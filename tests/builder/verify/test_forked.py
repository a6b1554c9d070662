"""Children forked from a zygote, each into a bubblewrap sandbox of its own: confined as an exec'd child is, apart
from each other, ended with their sandbox, and replaced by exec'd children wherever forking cannot work."""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from builder import config
from builder.verify.sandbox import bubblewrap, forked, zygote
from builder.verify.sandbox import process as sandbox
from builder.verify.sandbox.forked import ForkedProcess
from builder.verify.sandbox.pool import EvalPool
from builder.verify.sandbox.process import SandboxedProcess
from builder.verify.sandbox.suspects import suspect_text
from tests.fixtures.sandbox.probe_child import host_shared_memory

PROBE_CHILD = "tests.fixtures.sandbox.probe_child"
needs_bwrap = pytest.mark.skipif(not bubblewrap.bwrap_usable(), reason="bubblewrap not usable here")
ZERO_CAPS = {name: "0000000000000000" for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}


def run_job(child, job: dict, timeout_s: float = 60) -> tuple[dict | None, sandbox.ChildOutcome]:
    job = {"result_path": str(child.scratch / "result.json"), **job}
    job_path = child.scratch / "job.json"
    job_path.write_text(json.dumps(job))
    child.process.restart_clock()
    child.process.send(str(job_path))
    outcome = child.process.wait(timeout_s)
    result_path = Path(job["result_path"])
    return (json.loads(result_path.read_text()) if result_path.exists() else None), outcome


def probe_processes(pid: int) -> list[psutil.Process]:
    """Processes whose command line names the probe module (the zygote, its supervisors, exec'd children and their
    bwrap), other than `pid`; a killed sandbox's processes take a moment to go."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE and PROBE_CHILD in " ".join(proc.info["cmdline"] or []):
            found.append(proc)
    return [proc for proc in found if proc.pid != pid]


def shown_under_tmp() -> set[str]:
    """The names in /tmp of what the sandbox shows a child from there (the checkout, its venv, when under /tmp)."""
    tmp = Path("/tmp")
    return {path.relative_to(tmp).parts[0] for path in bubblewrap.interpreter_paths() if tmp in path.parents}


@needs_bwrap
def test_forked_children_are_confined_as_exec_children_and_apart_from_each_other(tmp_path, monkeypatch):
    monkeypatch.setenv("KA_PROBE_SECRET", "leaked-if-you-can-read-this")
    probe = config.REPO_ROOT / f"ka-forked-probe-{secrets.token_hex(4)}"
    reports = {}
    try:
        for fork in (True, False):
            with EvalPool(2, gpu=False, child_module=PROBE_CHILD, fork=fork) as pool, host_shared_memory() as segment:
                first, second = pool.take(), pool.take()
                assert isinstance(first.process, ForkedProcess) is fork
                job = {"sibling_scratch": str(second.scratch), "parent_pid": os.getpid(), "write_probe": str(probe),
                       "host_shm_id": segment}  # fmt: skip
                result, outcome = run_job(first, job)
                assert outcome.returncode == 0 and outcome.isolation == "bwrap", outcome.stderr_tail
                reports[fork] = result
                for child in (first, second):
                    child.discard()
    finally:
        probe.unlink(missing_ok=True)
    for found in reports.values():
        held = {name: value for name, value in found["caps"].items() if name != "CapBnd"}
        assert held == {name: ZERO_CAPS[name] for name in held}, found  # none to use, as root too
        assert found["no_new_privs"] == "1" and found["remount"] == "denied", found
        assert found["network"].startswith("denied") and found["write_host"].startswith("denied"), found
        assert found["sysctl"].startswith("denied"), found
        assert found["signal_parent"].startswith("denied") and not found["sibling_visible"], found
        assert found["secret_env"] is None, found
        assert found["host_shm"].startswith("denied"), found  # an IPC namespace of its own
        assert found["home"] == found["tmpdir"] == found["cwd"], found
        # Its /tmp shows its own folder and nothing else but what it reads from there: a checkout under /tmp.
        assert set(found["tmp"]) == {Path(found["cwd"]).name} | shown_under_tmp(), found
        # Nothing of the zygote's, its supervisor's or the parent's: stdin, stdout, stderr and the listing's own.
        assert found["descriptors"] == [0, 1, 2, 3], found
        assert max(found["pids_visible"]) < 10, found  # its own PID namespace: bwrap's few processes and its own
    assert reports[True]["caps"]["CapBnd"] == ZERO_CAPS["CapBnd"]  # a forked child cannot regain one by exec
    assert reports[True]["session_leader"]  # a session of its own, as bwrap's --new-session gives
    # What the zygote imported (torch) is out of a forked child's collections; an exec'd probe freezes none of its
    # imports (an interpreter may start with a few hundred frozen objects of its own)
    assert reports[True]["frozen_objects"] > 50_000 and reports[False]["frozen_objects"] < 10_000


@needs_bwrap
def test_a_forked_child_that_crashes_times_out_or_escapes_leaves_nothing(tmp_path):
    with EvalPool(1, gpu=False, child_module=PROBE_CHILD) as pool:
        crashing = pool.take()
        assert isinstance(crashing.process, ForkedProcess)
        result, outcome = run_job(crashing, {"do": "segfault"})
        assert result is None and outcome.signal == signal.SIGSEGV and not outcome.timed_out
        crashing.discard()

        hanging = pool.take()
        namespace = hanging.process._pid_ns
        result, outcome = run_job(hanging, {"do": "escape_and_hang"}, timeout_s=3)
        assert outcome.timed_out and result is None
        hanging.discard()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _in_namespace(namespace):
            time.sleep(0.1)
        assert not _in_namespace(namespace), "a process of the killed sandbox survived"
        assert not [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[:2] == ["sleep", "86398"]]
    assert _eventually(lambda: probe_processes(os.getpid()) == []), "the zygote or a supervisor outlived the pool"


def _in_namespace(namespace: str) -> list[int]:
    found = []
    for proc in psutil.process_iter():
        try:
            if os.readlink(f"/proc/{proc.pid}/ns/pid") == namespace and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (OSError, psutil.Error):
            continue
    return found


@needs_bwrap
def test_the_gate_stops_and_continues_a_forked_child(tmp_path):
    with EvalPool(1, gpu=False, child_module=PROBE_CHILD) as pool:
        child = pool.take()
        waiting = psutil.Process(child.process.child_pid)
        child.process.pause()
        assert _eventually(lambda: waiting.status() == psutil.STATUS_STOPPED)
        child.process.resume()
        assert _eventually(lambda: waiting.status() != psutil.STATUS_STOPPED)
        result, outcome = run_job(child, {})
        assert outcome.returncode == 0 and result["caps"] == ZERO_CAPS
        child.discard()


def _eventually(condition, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


@needs_bwrap
def test_a_zygote_that_cannot_start_leaves_exec_children(caplog):
    with caplog.at_level(logging.WARNING), EvalPool(1, gpu=False, child_module="tests.fixtures.sandbox.no_such"):
        pass
    assert "exec'd, not forked" in caplog.text and "ModuleNotFoundError" in caplog.text
    with EvalPool(1, gpu=False, child_module=PROBE_CHILD) as pool:  # another module: its own zygote
        child = pool.take()
        assert isinstance(child.process, ForkedProcess)
        child.discard()


@needs_bwrap
def test_a_child_that_cannot_join_its_sandbox_is_exec_d_instead(monkeypatch, caplog):
    # A holder that never says it is up: the sandbox is not there to join.
    monkeypatch.setattr(forked, "SANDBOX_HOLDER", ("sleep", "30"))
    monkeypatch.setattr(config, "FORK_TIMEOUT_S", 2.0)
    with caplog.at_level(logging.WARNING), EvalPool(1, gpu=False, child_module=PROBE_CHILD) as pool:
        child = pool.take()
        assert type(child.process) is SandboxedProcess
        result, outcome = run_job(child, {})
        assert outcome.returncode == 0 and result["no_new_privs"] == "1"
        child.discard()
    assert "the sandbox did not come up" in caplog.text
    assert _eventually(lambda: probe_processes(os.getpid()) == []), probe_processes(os.getpid())


@needs_bwrap
def test_a_forked_child_that_dies_while_it_starts_stops_the_forking(caplog):
    env = {"KA_PROBE_FAIL_AT_START": "1"}
    with caplog.at_level(logging.WARNING), EvalPool(1, gpu=False, env_extra=env, child_module=PROBE_CHILD) as pool:
        assert isinstance(pool._ready[0].process, ForkedProcess)
        assert _eventually(lambda: not pool._ready[0].process.alive())
        child = pool.take()  # the dead one is discarded; its replacements are exec'd
        assert type(child.process) is SandboxedProcess and type(pool._ready[0].process) is SandboxedProcess
        child.discard()
    assert "a forked child died before its job: exit code 1: probe: failing at start, as asked" in caplog.text


@needs_bwrap
def test_a_forked_child_whose_interpreter_the_sandbox_hides_stops_as_the_machinerys_failure(monkeypatch):
    monkeypatch.setenv("HF_HOME", sys.prefix)  # a folder whose secrets the sandbox hides: the interpreter's own
    env = {"KA_PROBE_CASE": "hidden interpreter"}  # a zygote of its own: another test may have given one up
    with EvalPool(1, gpu=False, env_extra=env, child_module=PROBE_CHILD) as pool:
        first = pool._ready[0].process
        assert isinstance(first, ForkedProcess)
        assert _eventually(lambda: not first.alive())
        outcome = first.wait(5)
    line = f"ka-sandbox: {sys.executable} is not in the sandbox"
    assert outcome.returncode == 1 and outcome.stderr_tail.strip() == line, outcome.stderr_tail
    assert suspect_text(outcome.stderr_tail) == f"the sandbox hides the interpreter: {line}"
    assert "probe:" not in outcome.stderr_tail  # none of the child module's code ran


def test_a_forked_child_runs_its_module_only_where_its_sandbox_shows_the_module(monkeypatch):
    ran = []
    module = type(sys)("ka_fake_child")
    module.__file__, module.main = __file__, lambda argv: ran.append(argv) or 7
    assert zygote.run_child(module) == 7 and ran == [["-"]]
    monkeypatch.setattr(module, "__file__", "/nonexistent/ka_fake_child.py")
    assert zygote.run_child(module) == 1 and ran == [["-"]]


def test_a_process_in_no_sandbox_of_its_own_cannot_be_joined():
    # this process itself: its parent may be one whose root cannot be read (init, for a test run left running)
    with pytest.raises(OSError, match="namespace"):
        zygote.join_sandbox(os.getpid(), "/")


def test_a_refused_join_leaves_no_handle_open():
    opened = set(os.listdir("/proc/self/fd"))
    for _ in range(3):
        with pytest.raises(OSError):
            zygote.join_sandbox(os.getpid(), "/")
    assert set(os.listdir("/proc/self/fd")) == opened


def test_fork_problem_names_an_initialised_gpu_driver(tmp_path):
    fds = tmp_path / "fd"
    fds.mkdir()
    (fds / "0").symlink_to("/dev/null")
    (fds / "1").symlink_to("pipe:[1234]")
    assert zygote.fork_problem(fds) is None  # libcuda.so mapped but never initialised leaves no device file open
    (fds / "7").symlink_to("/dev/nvidiactl")
    assert "/dev/nvidiactl" in zygote.fork_problem(fds)
    assert zygote.fork_problem() is None  # this process (CPU torch, or no CUDA call yet) has no driver initialised


def test_the_zygote_entry_point_says_how_to_use_it():
    done = subprocess.run([sys.executable, "-m", "builder.verify.sandbox.zygote"], capture_output=True, text=True,
                          cwd=config.REPO_ROOT, timeout=60)  # fmt: skip
    assert done.returncode == 2 and done.stderr.startswith("usage: python -m builder.verify.sandbox.zygote")


@pytest.mark.gpu
def test_the_real_child_s_zygote_never_loads_the_cuda_driver():
    """A CUDA context does not survive a fork: the zygote's imports, and the output digest's kernel it has compiled
    for the architecture the parent names, must leave the driver unloaded."""
    from builder.verify import environment
    from builder.verify.protocol.output_digest import arch_digits

    arch = arch_digits(environment.gpu_arch(0))
    code = ("from builder.verify.child import main as child; from builder.verify.sandbox import zygote; "
            "from builder.verify.protocol import output_digest; child.before_fork(); "
            "print(sorted(output_digest._COMPILED), zygote.fork_problem())")  # fmt: skip
    env = dict(os.environ, **{config.DIGEST_KERNEL_ARCH_ENV: arch})
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=config.REPO_ROOT,
                          env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == f"[{arch!r}] None", done.stdout + done.stderr


@pytest.mark.gpu
def test_a_process_that_asked_the_driver_anything_may_not_fork():
    code = "import torch; from builder.verify.sandbox import zygote; torch.cuda.is_available(); print(zygote.fork_problem())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=config.REPO_ROOT,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0 and "driver was initialised" in done.stdout, done.stdout + done.stderr


@needs_bwrap
@pytest.mark.gpu
def test_a_forked_child_makes_its_own_cuda_context():
    with EvalPool(1, gpu=True, env_extra={"CUDA_VISIBLE_DEVICES": "0"}, child_module=PROBE_CHILD) as pool:
        child = pool.take()
        assert isinstance(child.process, ForkedProcess)  # not an exec'd child standing in for a failed fork
        result, outcome = run_job(child, {"cuda": True})
        assert outcome.returncode == 0, outcome.stderr_tail
        assert result["cuda"] == {"available": True, "bad_fork": False, "sum": 1024.0}, result
        assert result["caps"] == ZERO_CAPS and result["network"].startswith("denied")
        child.discard()


class FakeZygote:
    """Stands in for a zygote process: starts after `delay_s`, or fails to."""

    started: list[FakeZygote] = []

    def __init__(self, child_module, env_extra=None, delay_s: float = 0.3, fails: bool = False) -> None:
        time.sleep(delay_s)
        if fails:
            raise forked.ForkFailed("the zygote is not usable: a test's")
        self.closed = False
        FakeZygote.started.append(self)

    def alive(self) -> bool:
        return not self.closed

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_zygotes(monkeypatch):
    FakeZygote.started = []
    monkeypatch.setattr(forked, "Zygote", FakeZygote)
    yield FakeZygote
    forked.close_zygotes()


def test_a_zygote_begun_in_the_background_is_waited_for_by_its_users_and_ended_by_the_last(fake_zygotes):
    key = ("tests.a_module", {"K": "v"})
    assert forked.started_zygote(*key) is None and fake_zygotes.started == []  # none known: none started here
    forked.start_zygote_soon(*key)
    forked.start_zygote_soon(*key)  # already starting: one start
    zygote = forked.started_zygote(*key)  # waits for the start under way
    assert zygote is fake_zygotes.started[0] and len(fake_zygotes.started) == 1
    assert forked.running_zygote(*key) is zygote  # a second user
    forked.release_zygote(*key)
    assert not zygote.closed
    forked.release_zygote(*key)
    assert zygote.closed and forked.running_zygote(*key) is None


def test_a_zygote_that_could_not_start_is_not_started_again(monkeypatch, fake_zygotes, caplog):
    monkeypatch.setattr(forked, "Zygote", lambda module, env=None: FakeZygote(module, env, delay_s=0, fails=True))
    with caplog.at_level(logging.WARNING):
        forked.start_zygote_soon("builder.verify.child.build", {"K": "w"})
        assert forked.started_zygote("builder.verify.child.build", {"K": "w"}) is None
    assert "compile children are exec'd, not forked: the zygote is not usable: a test's" in caplog.text
    forked.start_zygote_soon("builder.verify.child.build", {"K": "w"})
    assert forked.started_zygote("builder.verify.child.build", {"K": "w"}) is None
    assert fake_zygotes.started == []


def test_one_zygote_starting_holds_up_no_user_of_another(monkeypatch, fake_zygotes):
    monkeypatch.setattr(forked, "Zygote", lambda module, env=None: FakeZygote(module, env, delay_s=1.5))
    forked.start_zygote_soon("tests.slow_module")
    started = time.monotonic()
    monkeypatch.setattr(forked, "Zygote", lambda module, env=None: FakeZygote(module, env, delay_s=0))
    assert forked.acquire_zygote("tests.quick_module") is not None
    assert time.monotonic() - started < 1.0  # not behind the slow one's start
    forked.release_zygote("tests.quick_module")
    assert forked.started_zygote("tests.slow_module") is not None
    forked.release_zygote("tests.slow_module")
