"""Finding every process of one sandboxed run (trusted parent side): under bwrap by the run's PID namespace, which no
process of the run can leave; under process isolation by the run's environment marker, which escaped setsid
descendants keep."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil

MARKER_ENV = "KA_SANDBOX_RUN"  # every sandboxed process carries it; its value is unique per run
_KERNEL_LISTS_CHILDREN = Path(f"/proc/self/task/{os.getpid()}/children").exists()  # CONFIG_PROC_CHILDREN


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def marked(marker: str, namespace: str | None = None) -> list[psutil.Process]:
    """Every process of one sandboxed run: with `namespace` (bwrap's PID namespace, which no process of the run
    can leave, and which dies with bwrap), the processes in it; without (process isolation, or before the
    namespace is known), every process whose environment carries the run's marker (escaped setsid descendants
    included)."""
    return runs_processes([(marker, namespace)])[0]


def runs_processes(runs: Sequence[tuple[str, str | None]]) -> list[list[psutil.Process]]:
    """`marked` for each (marker, namespace) run, from one look over the machine's processes.

    The gate looks for its members' processes each time an owner takes or gives back the device, over every
    process of the machine (hundreds on a two-GPU box): one look for all its members, not one a member; a
    namespace is a link to read, where an environment is the process's memory to read, behind its own memory
    lock; and psutil's iteration is not used, which reads each process's start time."""
    by_namespace: dict[str, list[int]] = {}
    by_marker: dict[bytes, list[int]] = {}
    for index, (marker, namespace) in enumerate(runs):
        if namespace is not None:
            by_namespace.setdefault(namespace, []).append(index)
        else:
            by_marker.setdefault(f"{MARKER_ENV}={marker}".encode(), []).append(index)
    found: list[list[psutil.Process]] = [[] for _ in runs]
    if not runs:
        return found
    own = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == own:
            continue
        pid = int(name)
        indices = by_namespace.get(_pid_namespace(pid) or "", []) if by_namespace else []
        if not indices and by_marker:
            indices = [index for entry in _environment(pid) for index in by_marker.get(entry, [])]
        if not indices:
            continue
        try:
            process = psutil.Process(pid)
        except psutil.Error:  # gone since the look
            continue
        for index in indices:
            found[index].append(process)
    return found


def _environment(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return fh.read().split(b"\0")
    except OSError:
        return []


def sweep_marked(marker: str, sig: int = signal.SIGKILL, namespace: str | None = None) -> int:
    """Signal (kill, by default) every marked process of this run."""
    return signal_runs([(marker, namespace)], sig)


def signal_runs(runs: Sequence[tuple[str, str | None]], sig: int) -> int:
    """Signal every process of each (marker, namespace) run, found in one look; how many were signalled."""
    signalled = 0
    for process in {proc.pid: proc for procs in runs_processes(runs) for proc in procs}.values():
        try:
            process.send_signal(sig)
            signalled += 1
        except psutil.Error:
            continue
    return signalled


def child_namespace(pid: int) -> str | None:
    """The first PID namespace among `pid`'s descendants that is not this process's (bwrap's inner one)."""
    member = namespace_member(pid)
    return member[1] if member else None


def namespace_member(pid: int) -> tuple[int, str] | None:
    """The first of `pid`'s descendants, nearest first, in another PID namespace than this process (under bwrap:
    the sandbox's init, bwrap's own child), with that namespace."""
    own = _pid_namespace(os.getpid())
    for descendant in _descendants(pid):
        namespace = _pid_namespace(descendant)
        if namespace is not None and namespace != own:
            return descendant, namespace
    return None


def _descendants(pid: int) -> Iterator[int]:
    """`pid`'s descendants, nearest first, from the kernel's list of each thread's children: psutil's walk, the
    fallback for a kernel without the list, reads every process of the machine (once for each forked child)."""
    if not _KERNEL_LISTS_CHILDREN:
        try:
            yield from (child.pid for child in psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            pass
        return
    queue = [pid]
    while queue:
        parent = queue.pop(0)
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except OSError:  # gone
            continue
        for thread in threads:
            try:
                children = [int(child) for child in Path(f"/proc/{parent}/task/{thread}/children").read_text().split()]
            except OSError:  # the thread or the process ended
                continue
            yield from children
            queue.extend(children)
