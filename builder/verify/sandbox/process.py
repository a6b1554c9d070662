"""Run an untrusted child process in a sandbox (trusted parent side).

The child gets its own session (so its whole process group can be killed), an environment scrubbed to
`config.SANDBOX_ENV_ALLOW`, its scratch directory as cwd and HOME, resource limits, and bounded logs.
When bubblewrap works it also gets a read-only root with the user's credentials hidden, a private /tmp, no
network, no capabilities and read-only host-wide /proc settings (also when the builder runs as root), and a
private PID namespace that dies with it. Without bubblewrap ("process" isolation) a per-run marker in the
environment lets the parent find and kill descendants that escaped the process group (setsid).
"""

from __future__ import annotations

import ctypes
import functools
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

from builder import config
from builder.verify.sandbox import bytecode_cache
from builder.verify.sandbox.bubblewrap import bwrap_args, resolve_isolation
from builder.verify.sandbox.cores import work_cores
from builder.verify.sandbox.process_tree import MARKER_ENV, child_namespace, marked, signal_runs, sweep_marked


class SandboxCancelled(Exception):
    """The caller stopped waiting (a build shutting down): the child was killed and has no outcome to record."""


@dataclass
class ChildOutcome:
    returncode: int | None
    signal: int | None
    timed_out: bool
    stdout_tail: str
    stderr_tail: str
    wall_s: float
    isolation: str

    def describe(self) -> str:
        """One line naming how the child ended (for `crash`/`timeout` error texts)."""
        if self.timed_out:
            return f"timed out after {self.wall_s:.1f} s"
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = f"signal {self.signal}"
            return f"killed by {name}"
        return f"exit code {self.returncode}"


def sandbox_env(scratch: Path, marker: str, env_extra: dict[str, str] | None = None) -> dict[str, str]:
    """The child's whole environment: allow-listed variables plus what `python -m builder.verify...` needs."""
    env = {name: os.environ[name] for name in config.SANDBOX_ENV_ALLOW if name in os.environ}
    # The interpreter's own bin dir first: ninja and friends live next to the venv's python.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")])
    env["PYTHONPATH"] = str(config.REPO_ROOT)
    env["HOME"] = str(scratch)
    env["TMPDIR"] = str(scratch)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(env_extra or {})
    env[MARKER_ENV] = marker
    return env


_libc = ctypes.CDLL(None, use_errno=True)  # loaded here: a child between fork and exec imports and loads nothing
_PR_SET_PDEATHSIG = 1


def start_child(cores: set[int] | None, parent_pid: int | None) -> None:
    """Between fork and exec: the child's limits, and with `parent_pid` its death with the thread that started it
    (SIGKILL), as bwrap's --die-with-parent gives a sandbox. Without it a child started without bwrap outlived an
    engine that was stopped while the child ran a candidate's endless loop, for an hour of CPU."""
    if parent_pid is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before the signal was asked for
            os._exit(1)
    limit_resources(cores)


def limit_resources(cores: set[int] | None = None) -> None:
    """A child's limits, set in it before its code runs: between fork and exec (preexec_fn: no imports here, another
    thread may hold a lock), or by a zygote's fork."""
    if cores:  # the cores kept for timing windows are not this child's (until it owns a device)
        try:
            os.sched_setaffinity(0, cores)
        except OSError:
            pass
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (config.CHILD_FILE_SIZE_LIMIT, config.CHILD_FILE_SIZE_LIMIT))
    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    limit = config.CHILD_MAX_PROCESSES if hard == resource.RLIM_INFINITY else min(config.CHILD_MAX_PROCESSES, hard)
    resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CPU, (config.CHILD_CPU_SECONDS, config.CHILD_CPU_SECONDS))


def file_tail(handle: IO[bytes], limit: int = config.LOG_TAIL_BYTES) -> str:
    """The last `limit` bytes of a log file, as text."""
    handle.flush()
    size = handle.seek(0, os.SEEK_END)
    handle.seek(max(0, size - limit))
    return handle.read().decode("utf-8", errors="replace")


class SandboxedProcess:
    """A started sandboxed child. `send` writes to its stdin; `wait` ends it and everything it started."""

    def __init__(
        self,
        argv: Sequence[str],
        scratch_dir: str | Path,
        extra_binds: Sequence[str | Path] = (),
        gpu: bool = True,
        env_extra: dict[str, str] | None = None,
        isolation: str | None = None,
        stdin_pipe: bool = False,
        ro_binds: Sequence[str | Path] = (),
    ) -> None:
        command, env = self._prepare(argv, scratch_dir, extra_binds, gpu, env_extra, isolation, ro_binds)
        self.proc = self._spawn(command, env, subprocess.PIPE if stdin_pipe else subprocess.DEVNULL, self._stdout)

    def _prepare(self, argv: Sequence[str], scratch_dir: str | Path, extra_binds: Sequence[str | Path], gpu: bool,
                 env_extra: dict[str, str] | None, isolation: str | None,
                 ro_binds: Sequence[str | Path]) -> tuple[list[str], dict[str, str]]:  # fmt: skip
        """The state every sandboxed process starts with; the command line and environment that start it."""
        self.scratch = Path(scratch_dir).resolve()
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.isolation = resolve_isolation(isolation)
        self.marker = secrets.token_hex(16)
        env = sandbox_env(self.scratch, self.marker, env_extra)
        writable = [self.scratch, *(Path(path).resolve() for path in extra_binds)]
        if (bytecode := bytecode_cache.for_child(self.isolation, writable)) is not None:
            env[bytecode_cache.PREFIX_ENV] = str(bytecode)  # read-only below: no child changes what the next runs
            ro_binds = [*ro_binds, bytecode]
        command = list(argv)
        if self.isolation == "bwrap":
            bwrap = shutil.which("bwrap") or "bwrap"
            args = bwrap_args(self.scratch, extra_binds, gpu, ro_binds)
            command = [bwrap, *args, "--chdir", str(self.scratch), *command]
        # Anonymous files: the parent keeps the only name-less handle, the child gets the fd.
        self._stdout = tempfile.TemporaryFile()
        self._stderr = tempfile.TemporaryFile()
        self.started = time.monotonic()
        self._held_s = 0.0  # seconds stopped or waiting on the parent: not counted against the timeout
        self._held_since: float | None = None
        self._holds = 0
        self._hold_lock = threading.Lock()
        self._pid_ns: str | None = None
        return command, env

    def _spawn(self, command: list[str], env: dict[str, str], stdin: int, stdout: IO[bytes] | int) -> subprocess.Popen:
        return subprocess.Popen(
            command,
            cwd=self.scratch,
            env=env,
            stdin=stdin,
            stdout=stdout,
            stderr=self._stderr,
            start_new_session=True,
            preexec_fn=functools.partial(start_child, work_cores(), None if self.isolation == "bwrap" else os.getpid()),
            close_fds=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, line: str) -> None:
        """Write one line to the child's stdin and close it (the pool hands over the job path this way)."""
        assert self.proc.stdin is not None, "started without stdin_pipe"
        try:
            self.proc.stdin.write(line.rstrip("\n").encode() + b"\n")
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # the child already died; wait() reports how

    def restart_clock(self) -> None:
        """Count the timeout and wall time from now (a pre-started process idles before its job)."""
        self.started = time.monotonic()
        self._held_s = 0.0

    def hold_clock(self) -> None:
        """Stop counting time against the timeout (the child waits on the parent, or is stopped) until the
        matching `release_clock`; holds nest."""
        with self._hold_lock:
            if self._holds == 0:
                self._held_since = time.monotonic()
            self._holds += 1

    def release_clock(self) -> None:
        with self._hold_lock:
            if self._holds == 0:
                return
            self._holds -= 1
            if self._holds == 0 and self._held_since is not None:
                self._held_s += time.monotonic() - self._held_since
                self._held_since = None

    def held_s(self) -> float:
        with self._hold_lock:
            ongoing = time.monotonic() - self._held_since if self._held_since is not None else 0.0
            return self._held_s + ongoing

    def pause(self) -> None:
        """SIGSTOP the child's process group and every escaped descendant (another child owns the device)."""
        self.hold_clock()
        self._signal_all(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_all(signal.SIGCONT)
        self.release_clock()

    def pin(self, cores: set[int]) -> None:
        """Move every thread of the child's processes onto `cores` (it owns a device: its timing window gets
        cores no other sandboxed process runs on). Threads started later inherit the mask."""
        for proc in [psutil.Process(self.proc.pid)] if self.alive() else []:
            for member in [proc, *marked(self.marker, self._namespace())]:
                try:
                    for thread in member.threads():
                        os.sched_setaffinity(thread.id, cores)
                except (OSError, psutil.Error):
                    continue

    def _namespace(self) -> str | None:
        """The PID namespace bwrap made for the child (None under process isolation, or before it exists)."""
        if self.isolation == "bwrap" and self._pid_ns is None and self.alive():
            self._pid_ns = child_namespace(self.proc.pid)
        return self._pid_ns

    @staticmethod
    def pause_together(processes: Sequence[SandboxedProcess]) -> None:
        """`pause` each of them, their escaped descendants found in one look over the machine's processes (the
        gate stops every other member of its device for each window)."""
        for process in processes:
            process.hold_clock()
        _signal_together(processes, signal.SIGSTOP)

    @staticmethod
    def resume_together(processes: Sequence[SandboxedProcess]) -> None:
        _signal_together(processes, signal.SIGCONT)
        for process in processes:
            process.release_clock()

    def _signal_all(self, sig: int) -> None:
        _signal_together([self], sig)

    def kill(self) -> None:
        """SIGKILL the child's process group and every marked escapee; reap the child."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.isolation == "bwrap" and self._pid_ns is not None:
            # Every process of the run is in bwrap's namespace, which ends with bwrap (--die-with-parent): once bwrap
            # is gone, so are they, and the namespace's number may be a newer sandbox's.
            if self.proc.poll() is None:
                sweep_marked(self.marker, namespace=self._pid_ns)
        else:  # process isolation, or bwrap's namespace never looked up: the marker finds them
            sweep_marked(self.marker)
        try:
            self.proc.wait(timeout=config.SANDBOX_KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _wait_exit(self, timeout_s: float) -> bool:
        """Whether the child has exited, waiting up to `timeout_s` for it."""
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _exit_status(self) -> tuple[int | None, int | None]:
        """(returncode, signal) of the exited child."""
        returncode = self.proc.returncode
        if returncode is not None and returncode < 0:
            return returncode, -returncode
        if self.isolation == "bwrap" and returncode is not None and 128 < returncode <= 128 + 64:
            return returncode, returncode - 128  # bwrap reports a signalled child as 128 + signal
        return returncode, None

    def wait(self, timeout_s: float, cancel: threading.Event | None = None) -> ChildOutcome:
        """The child's outcome once it exits or `timeout_s` (from its start) passes; SandboxCancelled, the child
        killed, as soon as `cancel` is set."""
        timed_out = False
        while True:
            # Time held (stopped, or waiting for the parent's word) moves the deadline: re-read it each slice.
            deadline = self.started + timeout_s + self.held_s()
            remaining = max(0.0, deadline - time.monotonic())
            if self._wait_exit(min(remaining, config.SANDBOX_CANCEL_POLL_S)):
                break
            if cancel is not None and cancel.is_set():
                self.kill()
                self._stdout.close()
                self._stderr.close()
                raise SandboxCancelled(f"stopped after {time.monotonic() - self.started:.1f} s") from None
            if time.monotonic() >= self.started + timeout_s + self.held_s():
                timed_out = True
                break
        wall_s = time.monotonic() - self.started
        # Also after a normal exit: nothing the child started may outlive it.
        self.kill()
        returncode, sig = (None, None) if timed_out else self._exit_status()
        outcome = ChildOutcome(
            returncode=returncode,
            signal=sig,
            timed_out=timed_out,
            stdout_tail=file_tail(self._stdout),
            stderr_tail=file_tail(self._stderr),
            wall_s=wall_s,
            isolation=self.isolation,
        )
        self._stdout.close()
        self._stderr.close()
        return outcome


def _signal_together(processes: Sequence[SandboxedProcess], sig: int) -> None:
    """Signal each live process's group, then every process of their runs (escapees), found in one look."""
    alive = [process for process in processes if process.alive()]
    for process in alive:
        try:
            os.killpg(process.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    signal_runs([(process.marker, process._namespace()) for process in alive], sig)


def run_sandboxed(
    argv: Sequence[str],
    scratch_dir: str | Path,
    timeout_s: float,
    extra_binds: Sequence[str | Path] = (),
    gpu: bool = True,
    env_extra: dict[str, str] | None = None,
    isolation: str | None = None,
    ro_binds: Sequence[str | Path] = (),
    cancel: threading.Event | None = None,
    on_start: Callable[[SandboxedProcess], None] | None = None,
) -> ChildOutcome:
    """Run argv sandboxed to completion or timeout; the whole process tree is gone when this returns.

    `extra_binds` are writable besides the scratch dir; `ro_binds` are inputs that must stay readable
    although they lie under /tmp (which is private under bwrap). Once `cancel` is set (before the start or
    during the run) this raises SandboxCancelled instead. `on_start` is called with the started process."""
    if cancel is not None and cancel.is_set():
        raise SandboxCancelled("stopped before the start")
    child = SandboxedProcess(argv, scratch_dir, extra_binds, gpu, env_extra, isolation, ro_binds=ro_binds)
    try:
        if on_start is not None:
            on_start(child)
        return child.wait(timeout_s, cancel)
    except BaseException:
        child.kill()
        raise
