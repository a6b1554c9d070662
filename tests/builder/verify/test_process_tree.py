"""Finding a sandboxed run's processes: by bwrap's PID namespace where it has one, else by its marker."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from builder.verify.sandbox import process_tree
from builder.verify.sandbox.bubblewrap import bwrap_usable
from builder.verify.sandbox.process import SandboxedProcess

needs_bwrap = pytest.mark.skipif(not bwrap_usable(), reason="bubblewrap not usable here")
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def sandbox_namespace(child: SandboxedProcess) -> str:
    deadline = time.monotonic() + 15
    while (namespace := process_tree.child_namespace(child.pid)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert namespace is not None, "bwrap made no PID namespace"
    return namespace


@needs_bwrap
def test_a_namespace_is_the_whole_run_and_the_marker_is_looked_up_only_without_one(tmp_path):
    """A process outside the namespace that carries the run's marker (which no process of a bwrap run can be) is
    not the run's: reading every process's environment was most of what each stop of a member cost."""
    child = SandboxedProcess(SLEEP, tmp_path / "scratch", gpu=False, isolation="bwrap")
    outsider = subprocess.Popen(SLEEP, env={**os.environ, process_tree.MARKER_ENV: child.marker})
    try:
        namespace = sandbox_namespace(child)
        in_namespace = {proc.pid for proc in process_tree.marked(child.marker, namespace)}
        assert in_namespace, "the sandbox's processes were not found"
        assert all(process_tree._pid_namespace(pid) == namespace for pid in in_namespace)
        assert outsider.pid not in in_namespace
        by_marker = {proc.pid for proc in process_tree.marked(child.marker)}
        assert outsider.pid in by_marker and os.getpid() not in by_marker
    finally:
        outsider.kill()
        outsider.wait()
        child.kill()


@needs_bwrap
def test_a_sandbox_that_is_gone_never_sweeps_the_namespace_number_it_had(tmp_path):
    """Namespace numbers are reused: a run whose bwrap has exited must not kill by its old namespace, which may
    now be a newer sandbox's (made here the newer one's outright)."""
    older = SandboxedProcess([sys.executable, "-c", "pass"], tmp_path / "older", gpu=False, isolation="bwrap")
    newer = SandboxedProcess(SLEEP, tmp_path / "newer", gpu=False, isolation="bwrap")
    try:
        older.wait(timeout_s=30)
        older._pid_ns = sandbox_namespace(newer)  # as if the number had come round to the newer sandbox
        older.kill()
        time.sleep(0.2)
        assert newer.alive() and process_tree.marked(newer.marker, newer._pid_ns)
    finally:
        newer.kill()


def test_descendants_are_the_kernels_children_lists_nearest_first():
    grandchild = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {grandchild!r}]); time.sleep(60)",
        ]
    )
    try:
        deadline = time.monotonic() + 15
        while len(psutil.Process(parent.pid).children(recursive=True)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        walked = [child.pid for child in psutil.Process(parent.pid).children(recursive=True)]
        assert len(walked) == 2
        found = list(process_tree._descendants(parent.pid))
        assert set(found) == set(walked)
        assert psutil.Process(found[0]).ppid() == parent.pid and psutil.Process(found[1]).ppid() == found[0]
    finally:
        for child in psutil.Process(parent.pid).children(recursive=True):
            child.kill()
        parent.kill()
        parent.wait()
