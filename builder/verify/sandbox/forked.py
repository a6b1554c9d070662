"""Children forked from a zygote, each in a bubblewrap sandbox of its own (trusted parent side): evaluation children,
and compile children (`compile/build_child.py`).

`zygote.py` says why, and what the zygote, its supervisors and the children do. Here: `Zygote`, the zygote's
process and socket (one per child module and environment, started by its first user and ended by its last:
`acquire_zygote`, `release_zygote`), and `ForkedProcess`, a `SandboxedProcess` whose sandbox bwrap builds, with
the same arguments as an exec'd child's, around a placeholder (`SANDBOX_HOLDER`) that holds its namespaces, and
whose child the zygote forks into it. The parent treats it as any pre-started child: its job goes in on stdin, the
gate stops and pins it through the sandbox's PID namespace, its timeout counts the same, and killing the sandbox
kills it. Where the zygote cannot start or a child cannot join, `ForkFailed` says why and children are exec'd
instead. A clean reference's child may be forked from the same zygote, once it is up (`engine/children.fork_fresh`).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import secrets
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from builder import config
from builder.verify import milestones
from builder.verify.protocol.entry_points import BUILD_MODULE, CHILD_MODULE, ZYGOTE_MODULE
from builder.verify.sandbox import bytecode_cache
from builder.verify.sandbox.cores import work_cores
from builder.verify.sandbox.process import SandboxedProcess, file_tail, sandbox_env
from builder.verify.sandbox.process_tree import namespace_member, sweep_marked
from builder.verify.sandbox.zygote import MESSAGE_BYTES

log = logging.getLogger(__name__)

# Holds the sandbox's namespaces until the parent kills it; says "up" once bwrap has built the sandbox around it.
SANDBOX_HOLDER = ("sh", "-c", "echo up && exec sleep infinity")


# What the children a zygote forks are, for the warning that says they are exec'd instead.
CHILDREN_BY_MODULE = {CHILD_MODULE: "evaluation children", BUILD_MODULE: "compile children"}


def _exec_d_instead(child_module: str, reason: object) -> None:
    log.warning("%s are exec'd, not forked: %s", CHILDREN_BY_MODULE.get(child_module, f"children of {child_module}"),
                reason)  # fmt: skip


class ForkFailed(Exception):
    """No child could be forked this way (the zygote did not start, or the child could not join its sandbox)."""


class Zygote:
    """A zygote process for one child module and environment, and the socket its requests go through."""

    def __init__(self, child_module: str, env_extra: dict[str, str] | None = None) -> None:
        self.home = Path(tempfile.mkdtemp(prefix=config.SCRATCH_PREFIXES["zygote"]))
        env = sandbox_env(self.home, secrets.token_hex(16), env_extra)
        if (bytecode := bytecode_cache.for_child("bwrap", [self.home])) is not None:
            env[bytecode_cache.PREFIX_ENV] = str(bytecode)
        self._log = tempfile.TemporaryFile()
        self._lock = threading.Lock()
        self.channel, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        cores = work_cores()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", ZYGOTE_MODULE, child_module, str(zygote_end.fileno())],
                cwd=self.home, env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                pass_fds=(zygote_end.fileno(),), start_new_session=True,
                preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None,
            )  # fmt: skip
        finally:
            zygote_end.close()
        try:
            hello = self._receive(config.ZYGOTE_START_TIMEOUT_S)
            if not hello.get("ready"):
                raise ForkFailed(f"the zygote is not usable: {hello.get('problem')}")
            milestones.mark("build_zygote_ready" if child_module == BUILD_MODULE else "zygote_ready")
        except ForkFailed:
            self.close()
            raise

    def alive(self) -> bool:
        return self.process.poll() is None

    def fork_child(self, sandbox_pid: int, cwd: Path, descriptors: Sequence[int]) -> None:
        """Have a child forked into the sandbox that `sandbox_pid` runs in (stdin, stdout, stderr, status)."""
        cores = work_cores()  # None: every core
        request = json.dumps({"sandbox_pid": sandbox_pid, "cwd": str(cwd), "cores": sorted(cores or ())}).encode()
        with self._lock:
            if not self.alive():
                raise ForkFailed(f"the zygote has exited: {self._log_tail()}")
            try:
                socket.send_fds(self.channel, [request], list(descriptors))
            except OSError as exc:
                raise ForkFailed(f"cannot reach the zygote: {exc}") from None
            answer = self._receive(config.FORK_TIMEOUT_S)
        if "forked" not in answer:
            raise ForkFailed(f"the zygote did not fork: {answer.get('error')}")

    def _receive(self, timeout_s: float) -> dict[str, Any]:
        self.channel.settimeout(timeout_s)
        try:
            data = self.channel.recv(MESSAGE_BYTES)
        except OSError as exc:
            raise ForkFailed(f"no answer from the zygote ({exc}): {self._log_tail()}") from None
        if not data:
            raise ForkFailed(f"the zygote closed its socket: {self._log_tail()}")
        return json.loads(data)

    def _log_tail(self) -> str:
        return file_tail(self._log).strip() or "no output"

    def close(self) -> None:
        self.channel.close()  # the zygote leaves its loop; its supervisors finish with their children
        if self.alive():
            self.process.kill()
        self.process.wait()
        self._log.close()
        shutil.rmtree(self.home, ignore_errors=True)


_zygotes: dict[tuple, Zygote | None] = {}  # None: this zygote could not start, or a child could not join
_users: dict[tuple, int] = {}
_starting: dict[tuple, threading.Event] = {}  # set once the zygote of that key is up, or could not start
_zygotes_lock = threading.Lock()  # never held while a zygote starts (seconds of imports)


def _key(child_module: str, env_extra: dict[str, str] | None) -> tuple:
    return child_module, tuple(sorted((env_extra or {}).items()))


def _settled(key: tuple) -> bool:
    """This zygote is up, or is known not to start (None); under the lock."""
    return key in _zygotes and (_zygotes[key] is None or _zygotes[key].alive())


def acquire_zygote(child_module: str, env_extra: dict[str, str] | None = None) -> Zygote | None:
    """The zygote for this child module and environment, started by its first user (the others wait for it);
    None where it cannot start (the reason is logged once, and children are exec'd). Each caller gives it back
    with `release_zygote`. A zygote's start holds up only the users of that zygote."""
    key = _key(child_module, env_extra)
    while True:
        with _zygotes_lock:
            if _settled(key):
                if (known := _zygotes[key]) is not None:
                    _users[key] = _users.get(key, 0) + 1
                return known
            starting, ours = _claim_start(key)
        if ours:
            _start(key, child_module, env_extra, starting)
        else:
            starting.wait()


def start_zygote_soon(child_module: str, env_extra: dict[str, str] | None = None) -> None:
    """Begin this zygote's start in the background, unless it is up, starting, or could not start: once this returns,
    `started_zygote` waits for it."""
    key = _key(child_module, env_extra)
    with _zygotes_lock:
        if _settled(key):
            return
        starting, ours = _claim_start(key)
    if ours:
        threading.Thread(target=_start, args=(key, child_module, env_extra, starting), daemon=True,
                         name="ka-zygote-start").start()  # fmt: skip


def _claim_start(key: tuple) -> tuple[threading.Event, bool]:
    """(the event set once this zygote's start is over, whether the caller is to start it); under the lock."""
    if (starting := _starting.get(key)) is not None:
        return starting, False
    starting = _starting[key] = threading.Event()
    return starting, True


def _start(key: tuple, child_module: str, env_extra: dict[str, str] | None, starting: threading.Event) -> None:
    zygote: Zygote | None = None
    try:
        zygote = Zygote(child_module, env_extra)
    except (ForkFailed, OSError) as exc:
        _exec_d_instead(child_module, exc)
    finally:
        with _zygotes_lock:
            _zygotes[key] = zygote
            _starting.pop(key, None)
        starting.set()


def running_zygote(child_module: str, env_extra: dict[str, str] | None = None) -> Zygote | None:
    """The zygote for this child module and environment if one is up now (one user more: give it back with
    `release_zygote`), else None at once: one still starting, or none, is not waited for."""
    key = _key(child_module, env_extra)
    with _zygotes_lock:
        zygote = _zygotes.get(key)
        if zygote is None or not zygote.alive():
            return None
        _users[key] = _users.get(key, 0) + 1
        return zygote


def started_zygote(child_module: str, env_extra: dict[str, str] | None = None) -> Zygote | None:
    """The zygote for this child module and environment if one is up or starting (its start waited for; one user
    more: give it back with `release_zygote`), else None: none is started here."""
    key = _key(child_module, env_extra)
    with _zygotes_lock:
        starting = _starting.get(key)
    if starting is not None:
        starting.wait()
    return running_zygote(child_module, env_extra)


def release_zygote(child_module: str, env_extra: dict[str, str] | None = None) -> None:
    """One user less; the last one's release ends the zygote (a stream's pools end with the stream)."""
    key = _key(child_module, env_extra)
    with _zygotes_lock:
        if key not in _users:
            return  # given up (`give_up`) since it was acquired: nothing is held any more
        _users[key] -= 1
        if _users[key] <= 0 and (zygote := _zygotes.get(key)) is not None:
            _users.pop(key)
            _zygotes.pop(key)
            zygote.close()


def give_up(zygote: Zygote, reason: str) -> None:
    """Fork no more children from `zygote` (one could not join its sandbox): later children are exec'd."""
    with _zygotes_lock:
        for key, known in list(_zygotes.items()):
            if known is zygote:
                _zygotes[key] = None
                _users.pop(key, None)
                _exec_d_instead(key[0], reason)
    zygote.close()


@atexit.register
def close_zygotes() -> None:
    with _zygotes_lock:
        for zygote in _zygotes.values():
            if zygote is not None:
                zygote.close()
        _zygotes.clear()
        _users.clear()


class ForkedProcess(SandboxedProcess):
    """A child forked from `zygote` into a bwrap sandbox of its own: a pre-started evaluation child, or a clean
    reference's (`extra_binds`: where it writes its outputs, as an exec'd one's)."""

    def __init__(self, zygote: Zygote, scratch_dir: str | Path, gpu: bool = True,
                 env_extra: dict[str, str] | None = None, ro_binds: Sequence[str | Path] = (),
                 extra_binds: Sequence[str | Path] = ()) -> None:  # fmt: skip
        command, env = self._prepare(SANDBOX_HOLDER, scratch_dir, extra_binds, gpu, env_extra, "bwrap", ro_binds)
        if self.isolation != "bwrap":
            raise ForkFailed("bubblewrap is not usable here")
        self.child_pid: int | None = None
        self._ended: dict[str, Any] | None = None
        self._status_fd: int | None = None
        self._closed_by_supervisor = False
        self._pending = b""
        self._status_lock = threading.Lock()
        self._job_fd: int | None = None
        up_read, up_write = os.pipe()
        try:
            self.proc = self._spawn(command, env, subprocess.DEVNULL, up_write)
        finally:
            os.close(up_write)
        try:
            self._await_holder(up_read)
            self._fork(zygote)
        except BaseException:
            self.kill()
            self._stdout.close()
            self._stderr.close()
            raise
        finally:
            os.close(up_read)

    def _await_holder(self, up_read: int) -> None:
        ready, _, _ = select.select([up_read], [], [], config.FORK_TIMEOUT_S)
        if not ready or os.read(up_read, 16) != b"up\n":
            raise ForkFailed(f"the sandbox did not come up: {self._stderr_tail()}")

    def _fork(self, zygote: Zygote) -> None:
        member = namespace_member(self.proc.pid)
        if member is None:
            raise ForkFailed("the sandbox has no PID namespace of its own")
        self._pid_ns = member[1]
        job_read, self._job_fd = os.pipe()
        self._status_fd, status_write = os.pipe()
        os.set_blocking(self._status_fd, False)
        try:
            zygote.fork_child(member[0], self.scratch, [job_read, self._stdout.fileno(), self._stderr.fileno(),
                                                        status_write])  # fmt: skip
        finally:
            os.close(job_read)
            os.close(status_write)
        deadline = time.monotonic() + config.FORK_TIMEOUT_S
        while self.child_pid is None and self._ended is None and time.monotonic() < deadline:
            self._read_status(deadline - time.monotonic())
        if self.child_pid is None:
            raise ForkFailed(f"no child in the sandbox: {(self._ended or {}).get('error', 'no word')}")

    def _read_status(self, timeout_s: float, to_the_end: bool = False) -> None:
        """Take the supervisor's words that have come (waiting up to `timeout_s` for one); `to_the_end` reads on
        after its last word, to the end of the pipe (the supervisor has exited). The gate's threads ask too (is
        the child alive?): the wait is outside the lock, and the pipe does not block."""
        status = self._status_fd
        if status is None or self._closed_by_supervisor or (self._ended is not None and not to_the_end):
            return
        try:
            ready, _, _ = select.select([status], [], [], max(0.0, timeout_s))
        except (OSError, ValueError):  # closed meanwhile by kill()
            return
        if not ready:
            return
        with self._status_lock:
            try:
                data = os.read(status, 4096)
            except (BlockingIOError, OSError):  # another thread took the words, or the pipe was closed
                return
            if not data:
                self._closed_by_supervisor = True
                self._ended = self._ended or {"lost": True}  # gone without a word: the child's end is unknown
                return
            self._pending += data
            *lines, self._pending = self._pending.split(b"\n")
            for line in lines:
                message = json.loads(line)
                if "pid" in message:
                    self.child_pid = int(message["pid"])
                else:
                    self._ended = message

    def start_failure(self) -> str:
        """How a child that died before its job ended, with the end of what it wrote."""
        returncode, sig = self._exit_status()
        how = f"signal {sig}" if sig else f"exit code {returncode}"
        return f"{how}: {self._stderr_tail()}"

    def _stderr_tail(self) -> str:
        return file_tail(self._stderr).strip() or "no output"

    def alive(self) -> bool:
        self._read_status(0)
        return self.child_pid is not None and self._ended is None and self.proc.poll() is None

    def send(self, line: str) -> None:
        if self._job_fd is None:
            return
        try:
            os.write(self._job_fd, line.rstrip("\n").encode() + b"\n")
        except OSError:
            pass  # the child already died; wait() reports how
        finally:
            os.close(self._job_fd)
            self._job_fd = None

    def _wait_exit(self, timeout_s: float) -> bool:
        self._read_status(timeout_s)
        if self._ended is None and self.proc.poll() is not None:
            self._read_status(config.SANDBOX_KILL_GRACE_S)  # the sandbox is gone: its child's end follows
            self._ended = self._ended or {"lost": True}
        return self._ended is not None

    def _exit_status(self) -> tuple[int | None, int | None]:
        ended = self._ended or {}
        if "signal" in ended:
            return -int(ended["signal"]), int(ended["signal"])
        return ended.get("returncode"), None

    def kill(self) -> None:
        """Kill everything in the sandbox (the child too), then the sandbox."""
        namespace = self._pid_ns
        if namespace is not None and self.proc.poll() is None:
            sweep_marked(self.marker, namespace=namespace)
        super().kill()
        if self.child_pid is not None:  # the supervisor's last word, then its exit (the end of its pipe)
            deadline = time.monotonic() + config.SANDBOX_KILL_GRACE_S
            while self._status_fd is not None and not self._closed_by_supervisor and time.monotonic() < deadline:
                self._read_status(deadline - time.monotonic(), to_the_end=True)
        with self._status_lock:
            for name in ("_job_fd", "_status_fd"):
                if (descriptor := getattr(self, name)) is not None:
                    setattr(self, name, None)
                    os.close(descriptor)
