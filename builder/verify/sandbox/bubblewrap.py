"""A child's sandbox under bubblewrap (trusted parent side): whether bwrap can build it here, and its arguments.

The child sees a read-only root with the user's and the system's secrets hidden (`hidden_paths`), a minimal /dev
(the GPU's nodes where it needs them), its own /proc with the host-wide settings read-only (`PROC_READ_ONLY`), a
private /tmp through which only its inputs and its writable folders show, no network, a PID and an IPC namespace
and a session of its own that die with bwrap, and no capability, also when the builder runs as root.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

from builder import config

ISOLATIONS = ("bwrap", "process")
# /proc entries that change the whole host, read-only in the sandbox: a process whose uid is root writes sysctls
# (kernel.core_pattern would run a program of its choosing as root on the host at the next crash), IRQ affinities
# and the like on its uid alone, capabilities dropped or not.
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")


@functools.lru_cache(maxsize=1)
def bwrap_usable() -> bool:
    """Whether bubblewrap can build our sandbox here (installed is not enough in some containers)."""
    exe = shutil.which("bwrap")
    if exe is None:
        return False
    probe = [exe, *bwrap_args(scratch=None, extra_binds=(), gpu=False), "true"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=config.BWRAP_PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def resolve_isolation(requested: str | None = None) -> str:
    """`bwrap` when requested-or-auto and usable; `process` otherwise (warning when bwrap was asked for)."""
    if requested not in (None, *ISOLATIONS):
        raise ValueError(f"isolation must be one of {ISOLATIONS}, not {requested!r}")
    if requested == "process":
        return "process"
    if bwrap_usable():
        return "bwrap"
    if requested == "bwrap":
        warnings.warn("bubblewrap is not usable here; falling back to process isolation", stacklevel=2)
    return "process"


def weak_isolation_warning(requested: str | None = None) -> str | None:
    """The one-line warning a command prints before it runs candidates without bubblewrap (None where they run
    inside it): process isolation is a fresh process and a scrubbed environment only, so a candidate may write
    wherever the builder's user may, and as root anywhere (tests/fixtures/candidates/python/
    incorrect_escapes_read_only_root.py writes beside the task's file there)."""
    if resolve_isolation(requested) == "bwrap":
        return None
    reach = "anywhere on this machine, as root" if os.geteuid() == 0 else "wherever this user can"
    return (
        f"warning: bubblewrap is not usable here: candidates run with process isolation only and may write "
        f'{reach}; install bubblewrap to sandbox them (docs/architecture.md, "Sandbox contract")'
    )


def _gpu_device_nodes() -> list[str]:
    return sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri/*"))


def _under_tmp(path: Path) -> bool:
    return path == Path("/tmp") or Path("/tmp") in path.parents


def bwrap_args(
    scratch: Path | None, extra_binds: Sequence[str | Path], gpu: bool, ro_binds: Sequence[str | Path] = ()
) -> list[str]:
    args = ["--ro-bind", "/", "/", "--dev", "/dev"]
    for secret in hidden_paths():
        args += ["--tmpfs", str(secret)] if secret.is_dir() else ["--ro-bind", "/dev/null", str(secret)]
    if gpu:
        for node in _gpu_device_nodes():
            args += ["--dev-bind", node, node]
    args += ["--proc", "/proc"]
    for entry in PROC_READ_ONLY:  # host-wide settings that a root uid may write without any capability
        args += ["--ro-bind-try", entry, entry]
    args += ["--tmpfs", "/tmp"]
    # Binds come after --tmpfs /tmp so what the child needs under /tmp shows through the private /tmp: the
    # interpreter's own files and the checkout first, then read-only inputs (libraries, task files), then the
    # writable dirs (which may lie inside them).
    shown = [*interpreter_paths(), *(Path(p).resolve() for p in ro_binds)]
    for path in outermost(path for path in shown if _under_tmp(path) and path.exists()):
        args += ["--ro-bind", str(path), str(path)]
    for secret in hidden_paths():  # a checkout or venv bound above must not show a secret kept inside it again
        if _under_tmp(secret) and any(root in secret.parents for root in shown):
            args += ["--tmpfs", str(secret)] if secret.is_dir() else ["--ro-bind", "/dev/null", str(secret)]
    for path in [*([scratch] if scratch else []), *extra_binds]:
        path = Path(path).resolve()  # bwrap would resolve a relative source against its own cwd
        args += ["--bind", str(path), str(path)]
    # An IPC namespace of its own: System V shared memory, semaphores and message queues are otherwise the host's,
    # and a root uid may attach any segment root made (its mode checks the uid alone), another child's too.
    args += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--die-with-parent", "--new-session"]
    if os.geteuid() == 0:
        # bwrap started by root leaves the child every capability: it could remount the read-only root writable
        # and change torch, a task file or another candidate's build. Started by anyone else, it leaves none.
        args += ["--cap-drop", "ALL"]
    return args


def interpreter_paths() -> list[Path]:
    """What a child's `python -m builder...` reads besides the root's usual places: the interpreter as this process
    names it and as it resolves (a venv's bin/python is a link to its base), the venv and its base installation,
    every folder on sys.path (site-packages, editable installs) and the checkout. Both each path's own name and
    its resolved one: Python finds a venv by the name it was started with, and bwrap follows links inside the
    sandbox, where a link into the private /tmp leads nowhere. Paths a secret hides stay hidden (`bwrap_args`
    skips none of `hidden_paths`)."""
    names = [Path(sys.executable).parent, Path(sys.executable).resolve().parent, config.REPO_ROOT]
    names += [Path(prefix) for prefix in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix)]
    names += [Path(entry) for entry in sys.path if entry and os.path.isabs(entry)]
    # The tools a build runs (ninja, the compilers) come from the PATH the sandbox is given (`sandbox_env`).
    names += [Path(entry) for entry in os.environ.get("PATH", "").split(os.pathsep) if os.path.isabs(entry)]
    found = [Path(os.path.abspath(name)) for name in names]
    found += [name.resolve() for name in found]
    hidden = hidden_paths()
    # /tmp itself (a PATH or sys.path entry, a cwd) never: the sandbox's /tmp stays its own.
    return [path for path in dict.fromkeys(found)
            if path != Path("/tmp") and not any(path == h or h in path.parents for h in hidden)]  # fmt: skip


def outermost(paths: Iterable[Path]) -> list[Path]:
    """The paths none of the others contains (binding a folder shows everything inside it), shortest first."""
    kept: list[Path] = []
    for path in sorted(set(paths), key=lambda p: (len(p.parts), str(p))):
        if not any(root == path or root in path.parents for root in kept):
            kept.append(path)
    return kept


def hidden_paths() -> list[Path]:
    """The secrets no child may read (config.SANDBOX_HIDDEN_PATHS, and where the Hub's token lives by the
    environment), those that exist, links resolved."""
    names = [os.path.expanduser(name) for name in config.SANDBOX_HIDDEN_PATHS]
    names += [os.environ[name] for name in ("HF_HOME", "HF_TOKEN_PATH") if os.environ.get(name)]
    if os.environ.get("XDG_CACHE_HOME"):
        names.append(os.path.join(os.environ["XDG_CACHE_HOME"], "huggingface"))
    return list(dict.fromkeys(Path(name).resolve() for name in names if os.path.exists(name)))
