"""A zygote for evaluation or compile children: imports once, forks each child into a sandbox of its own.

    python -m builder.verify.sandbox.zygote CHILD_MODULE SOCKET_FD

A pre-started child spent about 4 of its 7 core-s importing torch and what the checks import (measured),
on the cores the builds and the other children need. The zygote does those imports once (the child module's
`before_fork`), in a process that never loads candidate code and never touches the GPU (a CUDA context does not
survive a fork), and forks each child from there. Three roles, each a process:

- the **zygote** (trusted): imports, then answers the parent's requests on a SOCK_SEQPACKET socket: it says
  {"ready": bool, "problem": str|None} once, then takes {"sandbox_pid", "cwd", "cores"} with four descriptors
  (stdin, stdout, stderr, status), forks a supervisor and answers {"forked": pid} or {"error": why};
- the **supervisor** (trusted, the zygote's fork): joins the namespaces of the bubblewrap sandbox that the parent
  made for this child alone (`sandbox_pid` is a process inside it: the same read-only root, private /tmp, network
  and PID namespace as an exec'd child's), forks the child into its PID namespace and writes JSON lines on the
  status descriptor: {"pid": host pid} once the child exists, then {"returncode": N} or {"signal": N} once it has
  ended, or {"error": why} where it could not join;
- the **child** (untrusted from here on): a new session, its descriptors, HOME and TMPDIR, the resource limits,
  then every capability and privilege dropped and checked gone, before any other code runs; then a check that the
  sandbox shows its interpreter, its module and torch (`run_child`: an exec'd child could not have started
  otherwise); then `CHILD_MODULE.main(["-"])` (its CUDA context, its job path from stdin), exactly as an exec'd
  pre-started child.

Nothing of one candidate reaches another: each child is a copy of a zygote that never ran candidate code, and it
sees only its own sandbox. The parent side is `forked.py`.
"""

from __future__ import annotations

import ctypes
import fcntl
import gc
import importlib
import json
import os
import signal
import socket
import sys
import tempfile
import traceback
from typing import Any

from builder.verify.sandbox.process import limit_resources

# setns(2) flags, in the order a process joins: the user namespace first (it owns the others), the PID namespace
# last (it applies to the children forked afterwards).
NAMESPACES = (("user", 0x10000000), ("ipc", 0x08000000), ("uts", 0x04000000), ("net", 0x40000000),
              ("cgroup", 0x02000000), ("mnt", 0x00020000), ("pid", 0x20000000))  # fmt: skip
_FLAGS = dict(NAMESPACES)
_NS_GET_PARENT = 0xB702  # ioctl: the parent of a user namespace
MAX_USER_NAMESPACE_DEPTH = 8
# A sandbox the child may join must have these of its own (bwrap's: a private root, no network, its own PIDs).
REQUIRED_NAMESPACES = frozenset({"mnt", "net", "pid"})
MESSAGE_BYTES = 1 << 16
DESCRIPTORS_PER_REQUEST = 4  # stdin, stdout, stderr, status

_PR_SET_SECUREBITS, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT = 28, 24, 38, 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
# Root keeps no capability across exec, and none can come back (NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE,
# each locked; KEEP_CAPS_LOCKED).
_SECUREBITS = 0b11101111
_CAPABILITY_VERSION_3 = 0x20080522
_CAPABILITY_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def fork_problem(fd_dir: str | os.PathLike = "/proc/self/fd") -> str | None:
    """Why children forked from this process could not be trusted to start cleanly, or None.

    A CUDA context does not survive a fork, nor does a driver that was initialised (cuInit, which any device
    query makes). The driver library merely being mapped is harmless: `import torch` maps libcuda.so through
    its NVRTC wrapper, and a forked child still makes its own context. An initialised driver holds the GPU's
    device files open, so those are what is looked for."""
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue  # closed meanwhile (the listing's own fd)
        if target.startswith("/dev/nvidia"):
            return f"the GPU driver was initialised before the fork ({target} open): a CUDA context does not survive it"
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "cuda", None) is not None and torch.cuda.is_initialized():
        return "torch initialised CUDA before the fork: a CUDA context does not survive it"
    return None


def join_sandbox(sandbox_pid: int, cwd: str) -> None:
    """Enter the namespaces and the root of the sandbox that `sandbox_pid` runs in (the PID namespace applies to
    the next fork). Raises OSError where it cannot, or where that process is in no sandbox of its own; joined or
    not, it leaves none of the handles it opened."""
    handles: list[int] = []
    try:
        root = os.open(f"/proc/{sandbox_pid}/root", os.O_RDONLY | os.O_DIRECTORY)
        handles.append(root)
        joining = {}
        for name, _ in NAMESPACES:  # every handle opened first: /proc is another once in the mount namespace
            target = f"/proc/{sandbox_pid}/ns/{name}"
            if os.path.exists(target) and os.readlink(target) != os.readlink(f"/proc/self/ns/{name}"):
                joining[name] = os.open(target, os.O_RDONLY)
                handles.append(joining[name])
        missing = REQUIRED_NAMESPACES - set(joining)
        if missing:
            raise OSError(0, f"process {sandbox_pid} shares this process's {', '.join(sorted(missing))} namespace")
        # bwrap started by another user than root makes a user namespace that owns the others and, inside it, the
        # one its child runs in: the outermost is joined first (it gives the rights over the others), the innermost
        # last.
        users = _user_namespaces_from_ours(joining.pop("user"), handles) if "user" in joining else []
        for handle in users[:1]:
            _check(_libc.setns(handle, _FLAGS["user"]), "setns(user)")
        for name, handle in joining.items():
            _check(_libc.setns(handle, _FLAGS[name]), f"setns({name})")
        for handle in users[1:]:
            _check(_libc.setns(handle, _FLAGS["user"]), "setns(user)")
        # setns puts the root at the namespace's root mount, which bwrap's pivot_root made the sandbox's root; the
        # holder's own root is taken as well (as nsenter --root does), whatever a later bwrap does there.
        os.fchdir(root)
        os.chroot(".")
        os.chdir(cwd)
    finally:
        for handle in handles:
            os.close(handle)


def _user_namespaces_from_ours(innermost: int, handles: list[int]) -> list[int]:
    """Handles on the user namespaces between this process's (left out) and `innermost`, outermost first; each it
    opens is added to `handles`, for the caller to close."""
    own = os.stat("/proc/self/ns/user").st_ino
    chain = [innermost]
    while len(chain) <= MAX_USER_NAMESPACE_DEPTH:
        parent = fcntl.ioctl(chain[-1], _NS_GET_PARENT)
        handles.append(parent)
        if os.fstat(parent).st_ino == own:
            return chain[::-1]
        chain.append(parent)
    raise OSError(0, "the sandbox's user namespace is not below this process's")


def _status_fields() -> dict[str, str]:
    with open("/proc/self/status") as status:
        return dict(line.split(":", 1) for line in status.read().splitlines() if ":" in line)


def drop_privileges() -> None:
    """No capability in any set, none to regain by exec, no new privileges: as bwrap leaves its child. Raises
    OSError where a step fails or the result is not that."""
    _check(_libc.prctl(_PR_SET_SECUREBITS, _SECUREBITS, 0, 0, 0), "securebits")
    with open("/proc/sys/kernel/cap_last_cap") as last:
        for capability in range(int(last.read()) + 1):
            _check(_libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0), f"dropping capability {capability}")
    _check(_libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "ambient capabilities")
    header, data = _CapHeader(_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    fields = _status_fields()
    kept = [name for name in _CAPABILITY_FIELDS if int(fields.get(name, "1").strip(), 16) != 0]
    if kept or fields.get("NoNewPrivs", "0").strip() != "1":
        raise OSError(0, f"privileges left after the drop: {kept or 'NoNewPrivs'}")


def become_child(descriptors: list[int], cwd: str, cores: list[int] | None) -> None:
    """The child's first steps after its fork, before any code it could be attacked through runs."""
    os.setsid()
    for target, descriptor in enumerate(descriptors[:3]):
        os.dup2(descriptor, target)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the zygote's socket and the status pipe among them
    os.environ["HOME"] = os.environ["TMPDIR"] = cwd
    tempfile.tempdir = None  # computed again from TMPDIR
    limit_resources(set(cores) if cores else None)
    drop_privileges()


def hidden_from_the_sandbox(module: Any) -> str | None:
    """A forked child's interpreter was loaded outside its sandbox. What it reads from now on (the interpreter, the
    child module, torch's headers and libraries) must be in the sandbox too, as an exec'd child's start shows: the
    first path that is not, else None."""
    torch = sys.modules.get("torch")
    for path in (sys.executable, getattr(module, "__file__", None), torch and os.path.dirname(torch.__file__)):
        if path and not os.path.exists(path):
            return path
    return None


def run_child(module: Any) -> int:
    """The child module's `main(["-"])` in its sandbox. Where the sandbox hides what an exec'd child would need to
    start, a line on stderr says so (`sandbox/suspects.py`: the machinery's failure, never the candidate's) and
    the child ends before any of the child module's code runs."""
    if (hidden := hidden_from_the_sandbox(module)) is not None:
        print(f"ka-sandbox: {hidden} is not in the sandbox", file=sys.stderr)
        return 1
    return int(module.main(["-"]) or 0)


def _report(descriptor: int, message: dict[str, Any]) -> None:
    os.write(descriptor, (json.dumps(message) + "\n").encode())


def supervise(module: Any, request: dict[str, Any], descriptors: list[int]) -> int:
    """The supervisor: join the sandbox, fork the child into it, report its host pid and how it ended."""
    status = descriptors[3]
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote ignores it: this process waits for its child
    try:
        join_sandbox(int(request["sandbox_pid"]), str(request["cwd"]))
    except (OSError, KeyError, ValueError) as exc:
        _report(status, {"error": f"could not join the sandbox: {exc}"})
        return 1
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            become_child(descriptors, str(request["cwd"]), request.get("cores"))
            code = run_child(module)
        except BaseException:  # noqa: BLE001 - the parent reads how it ended from the status and stderr
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            # As an exec'd child: no interpreter teardown (after a CUDA fault its destructors can hang).
            os._exit(code)
    for descriptor in descriptors[:3]:
        os.close(descriptor)
    _report(status, {"pid": pid})
    _, wait_status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(wait_status):
        _report(status, {"signal": os.WTERMSIG(wait_status)})
    else:
        _report(status, {"returncode": os.waitstatus_to_exitcode(wait_status)})
    return 0


def serve(channel: socket.socket, module: Any) -> None:
    """Fork a supervisor for each request until the parent closes its end of the socket."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    while True:
        try:
            message, descriptors, _, _ = socket.recv_fds(channel, MESSAGE_BYTES, DESCRIPTORS_PER_REQUEST)
        except OSError:
            return
        if not message:
            return  # the parent is gone
        try:
            request = json.loads(message)
            if len(descriptors) != DESCRIPTORS_PER_REQUEST:
                raise ValueError(f"{len(descriptors)} descriptors, not {DESCRIPTORS_PER_REQUEST}")
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
        except (OSError, ValueError) as exc:
            channel.send(json.dumps({"error": str(exc)}).encode())
        else:
            if pid == 0:
                channel.detach()  # its descriptor is closed below, not by this object
                code = 1
                try:
                    code = supervise(module, request, descriptors)
                finally:
                    os._exit(code)
            channel.send(json.dumps({"forked": pid}).encode())
        for descriptor in descriptors:
            os.close(descriptor)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m builder.verify.sandbox.zygote CHILD_MODULE SOCKET_FD", file=sys.stderr)
        return 2
    channel = socket.socket(fileno=int(argv[1]))
    try:
        module = importlib.import_module(argv[0])
        before_fork = getattr(module, "before_fork", None)
        if before_fork is not None:
            before_fork()
        gc.freeze()  # what the imports made stays out of every child's collections: no walk, no copied pages
        problem = fork_problem()
    except Exception as exc:  # noqa: BLE001 - said to the parent, which starts children without a zygote
        problem = f"the zygote's imports failed: {type(exc).__name__}: {exc}"
    channel.send(json.dumps({"ready": problem is None, "problem": problem}).encode())
    if problem is None:
        serve(channel, module)
    return 0 if problem is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
