"""Finding every process of one sandboxed run (trusted parent side): by the run's environment marker, which
escaped setsid descendants keep, and by bwrap's PID namespace, which no process of the run can leave."""

from __future__ import annotations

import os
import signal

import psutil

MARKER_ENV = "KA_SANDBOX_RUN"  # every sandboxed process carries it; its value is unique per run


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def marked(marker: str, namespace: str | None = None) -> list[psutil.Process]:
    """Every process whose environment carries this run's marker (escaped setsid descendants included), and every
    process of the run's own PID namespace (bwrap's: a process that cleared its environment cannot leave it)."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == os.getpid():
            continue
        if namespace is not None and _pid_namespace(proc.pid) == namespace:
            found.append(proc)
            continue
        try:
            with open(f"/proc/{proc.pid}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.append(proc)
        except OSError:
            continue
    return found


def sweep_marked(marker: str, sig: int = signal.SIGKILL, namespace: str | None = None) -> int:
    """Signal (kill, by default) every marked process of this run."""
    killed = 0
    for proc in marked(marker, namespace):
        try:
            proc.send_signal(sig)
            killed += 1
        except psutil.Error:
            continue
    return killed


def child_namespace(pid: int) -> str | None:
    """The first PID namespace among `pid`'s descendants that is not this process's (bwrap's inner one)."""
    member = namespace_member(pid)
    return member[1] if member else None


def namespace_member(pid: int) -> tuple[int, str] | None:
    """The first of `pid`'s descendants in another PID namespace than this process (under bwrap: the sandbox's
    init), with that namespace."""
    own = _pid_namespace(os.getpid())
    try:
        for descendant in psutil.Process(pid).children(recursive=True):
            namespace = _pid_namespace(descendant.pid)
            if namespace is not None and namespace != own:
                return descendant.pid, namespace
    except psutil.Error:
        pass
    return None
