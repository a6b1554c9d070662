"""The sandbox: scrubbed environment, no surviving processes, timeouts, signals, bwrap confinement."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from builder import config
from builder.verify.sandbox import bubblewrap
from builder.verify.sandbox import process as sandbox
from builder.verify.sandbox.process import run_sandboxed

ISOLATIONS = [
    "process",
    pytest.param("bwrap", marks=pytest.mark.skipif(not bubblewrap.bwrap_usable(), reason="no bwrap")),
]
needs_bwrap = pytest.mark.skipif(not bubblewrap.bwrap_usable(), reason="bubblewrap not usable here")


def python(code: str, *extra: str) -> list[str]:
    return [sys.executable, "-c", code, *extra]


def processes_with(marker: str, settle_s: float = 5.0) -> list[psutil.Process]:
    """Processes still alive whose command line holds `marker`, after up to `settle_s` for the ones being killed to
    end. A zombie has ended and runs nothing: an inner bwrap whose parent was killed can wait a moment for an init
    that reaps orphans lazily, and a killed process is listed alive until the kernel has taken it down."""
    deadline = time.monotonic() + settle_s
    while True:
        found = []
        for proc in psutil.process_iter(["cmdline", "status"]):
            if proc.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(proc.info["cmdline"] or []):
                found.append(proc)
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.1)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_parent_secrets_are_invisible_and_scratch_is_home(tmp_path, monkeypatch, isolation):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    code = "import json, os; json.dump({'env': dict(os.environ), 'cwd': os.getcwd()}, open('seen.json', 'w'))"
    outcome = run_sandboxed(python(code), tmp_path, timeout_s=60, isolation=isolation)
    assert outcome.returncode == 0, outcome.stderr_tail
    assert outcome.isolation == isolation
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert "HF_TOKEN" not in seen["env"] and "OPENAI_API_KEY" not in seen["env"]
    assert not any("secret-value" in value or "secret_value" in value for value in seen["env"].values())
    allowed = set(config.SANDBOX_ENV_ALLOW) | {"HOME", "TMPDIR", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE",
                                               "PYTHONUNBUFFERED", "PWD", sandbox.MARKER_ENV,
                                               "PYTHONPYCACHEPREFIX"}  # fmt: skip
    assert set(seen["env"]) <= allowed
    assert seen["env"]["HOME"] == str(tmp_path.resolve()) == seen["cwd"]


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_detached_grandchild_does_not_survive(tmp_path, isolation):
    marker = f"ka-test-orphan-{secrets.token_hex(6)}"
    # Double fork + setsid: the grandchild leaves the child's session and process group.
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(120)', sys.argv[1]])\n"
        "    os._exit(0)\n"
        "time.sleep(0.5)\n"
    )
    outcome = run_sandboxed(python(code, marker), tmp_path, timeout_s=60, isolation=isolation)
    assert outcome.returncode == 0, outcome.stderr_tail
    time.sleep(0.2)
    assert processes_with(marker) == []


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_infinite_loop_times_out_and_leaves_nothing(tmp_path, isolation):
    marker = f"ka-test-loop-{secrets.token_hex(6)}"
    started = time.monotonic()
    outcome = run_sandboxed(python("while True: pass", marker), tmp_path, timeout_s=1.5, isolation=isolation)
    assert outcome.timed_out and outcome.returncode is None
    assert time.monotonic() - started < 30
    assert "timed out" in outcome.describe()
    assert processes_with(marker) == []


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_cancel_kills_a_running_child_at_once_and_leaves_nothing(tmp_path, isolation):
    marker = f"ka-test-cancel-{secrets.token_hex(6)}"
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(sandbox.SandboxCancelled):
        run_sandboxed(python("import time; time.sleep(60)", marker), tmp_path, timeout_s=60, isolation=isolation,
                      cancel=cancel)  # fmt: skip
    assert time.monotonic() - started < 0.5 + 2 * config.SANDBOX_CANCEL_POLL_S + config.SANDBOX_KILL_GRACE_S + 3
    assert processes_with(marker) == []


def test_cancel_set_before_the_start_starts_nothing(tmp_path):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(sandbox.SandboxCancelled):
        run_sandboxed(python("open('ran', 'w')"), tmp_path, timeout_s=60, isolation="process", cancel=cancel)
    assert not (tmp_path / "ran").exists()


def test_an_unset_cancel_changes_nothing(tmp_path):
    outcome = run_sandboxed(python("print('done')"), tmp_path, timeout_s=60, isolation="process",
                            cancel=threading.Event())  # fmt: skip
    assert outcome.returncode == 0 and "done" in outcome.stdout_tail
    looped = run_sandboxed(python("while True: pass"), tmp_path, timeout_s=1.0, isolation="process",
                           cancel=threading.Event())  # fmt: skip
    assert looped.timed_out


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_segfault_is_reported_as_a_signal(tmp_path, isolation):
    outcome = run_sandboxed(python("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"), tmp_path, 60,
                            isolation=isolation)  # fmt: skip
    assert outcome.signal == signal.SIGSEGV and not outcome.timed_out
    assert "SIGSEGV" in outcome.describe()


def test_logs_are_bounded_tails_and_rlimits_apply(tmp_path):
    code = (
        "import resource, sys\n"
        "print('x' * 200_000)\n"
        "print('core', resource.getrlimit(resource.RLIMIT_CORE), 'cpu', resource.getrlimit(resource.RLIMIT_CPU))\n"
        "sys.stderr.write('e' * 50_000 + 'END')\n"
    )
    outcome = run_sandboxed(python(code), tmp_path, timeout_s=60, isolation="process")
    assert outcome.returncode == 0
    assert len(outcome.stdout_tail.encode()) <= config.LOG_TAIL_BYTES
    assert f"core (0, 0) cpu ({config.CHILD_CPU_SECONDS}, {config.CHILD_CPU_SECONDS})" in outcome.stdout_tail
    assert outcome.stderr_tail.endswith("END") and len(outcome.stderr_tail) <= config.LOG_TAIL_BYTES


@needs_bwrap
def test_network_is_unreachable_under_bwrap(tmp_path):
    code = (
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=3)\n"
        "    print('CONNECTED')\n"
        "except OSError as exc:\n"
        "    print('BLOCKED', exc)\n"
        "print('IFACES', sorted(name for _, name in socket.if_nameindex()))\n"
    )
    outcome = run_sandboxed(python(code), tmp_path, timeout_s=60, isolation="bwrap")
    assert "BLOCKED" in outcome.stdout_tail, outcome.stdout_tail + outcome.stderr_tail
    assert "IFACES ['lo']" in outcome.stdout_tail


@needs_bwrap
def test_the_hosts_shared_memory_is_out_of_reach_under_bwrap(tmp_path):
    """System V IPC lives in the IPC namespace: in the host's, a child whose uid is root (capabilities dropped or
    not) attaches any segment root made, another child's or a host service's."""
    from tests.fixtures.sandbox.probe_child import host_shared_memory

    code = (
        "import sys\n"
        "from tests.fixtures.sandbox.probe_child import attach_shared_memory\n"
        "print('SHM', attach_shared_memory(int(sys.argv[1])))\n"
    )
    with host_shared_memory() as segment:
        outcome = run_sandboxed(python(code, str(segment)), tmp_path, timeout_s=60, isolation="bwrap")
        unconfined = run_sandboxed(python(code, str(segment)), tmp_path, timeout_s=60, isolation="process")
    assert outcome.returncode == 0, outcome.stderr_tail
    assert "SHM denied" in outcome.stdout_tail, outcome.stdout_tail
    assert "SHM allowed" in unconfined.stdout_tail, unconfined.stdout_tail + unconfined.stderr_tail  # the probe works


@needs_bwrap
def test_writes_outside_scratch_fail_under_bwrap(tmp_path):
    scratch = tmp_path / "scratch"
    outside = tmp_path / "outside.txt"
    repo_file = config.REPO_ROOT / f"ka-sandbox-probe-{secrets.token_hex(4)}"
    code = (
        "import sys\n"
        "for target in sys.argv[1:]:\n"
        "    try:\n"
        "        open(target, 'w').write('escaped')\n"
        "        print('WROTE', target)\n"
        "    except OSError as exc:\n"
        "        print('DENIED', target, exc.errno)\n"
        "open('inside.txt', 'w').write('ok')\n"
    )
    outcome = run_sandboxed(python(code, str(outside), str(repo_file), "/etc/ka-probe"), scratch, 60, isolation="bwrap")
    assert outcome.returncode == 0, outcome.stderr_tail
    assert not outside.exists() and not repo_file.exists() and not Path("/etc/ka-probe").exists()
    assert f"DENIED {repo_file}" in outcome.stdout_tail and "DENIED /etc/ka-probe" in outcome.stdout_tail
    assert (scratch / "inside.txt").read_text() == "ok"


@needs_bwrap
def test_a_child_keeps_no_capability_and_cannot_remount_the_root_writable(tmp_path):
    """bwrap started by root leaves the child every capability unless told otherwise: a candidate could then
    remount the read-only root writable and change torch, a task file or another candidate's build on the host."""
    probe = config.REPO_ROOT / f"ka-sandbox-probe-{secrets.token_hex(4)}"
    code = (
        "import ctypes, os, sys\n"
        "status = dict(line.split(':', 1) for line in open('/proc/self/status').read().splitlines() if ':' in line)\n"
        "print('CAPS', status['CapEff'].strip(), status['CapPrm'].strip(), 'NNP', status['NoNewPrivs'].strip())\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "MS_REMOUNT, MS_BIND = 32, 4096\n"
        "if libc.mount(b'none', b'/', None, MS_REMOUNT | MS_BIND, None) == 0:\n"
        "    print('REMOUNTED')\n"
        "    try:\n"
        "        open(sys.argv[1], 'w').write('escaped')\n"
        "    except OSError:\n"
        "        pass\n"
        "else:\n"
        "    print('MOUNT DENIED', ctypes.get_errno())\n"
    )
    outcome = run_sandboxed(python(code, str(probe)), tmp_path, timeout_s=60, isolation="bwrap")
    try:
        assert outcome.returncode == 0, outcome.stderr_tail
        assert "CAPS 0000000000000000 0000000000000000 NNP 1" in outcome.stdout_tail, outcome.stdout_tail
        assert "MOUNT DENIED" in outcome.stdout_tail and not probe.exists()
    finally:
        probe.unlink(missing_ok=True)


@needs_bwrap
def test_a_child_cannot_change_host_wide_kernel_settings(tmp_path):
    """Under root, a sysctl is written on the uid alone: kernel.core_pattern set to "|/tmp/ka-eval-.../x" (a path
    the scratch has on the host too) would run the candidate's program as root on the host at the next crash. The
    probe writes back the value it read, so a sandbox that fails this test changes nothing."""
    code = (
        "for path in ('/proc/sys/kernel/core_pattern', '/proc/sys/vm/swappiness'):\n"
        "    value = open(path).read()\n"
        "    try:\n"
        "        with open(path, 'w') as setting:\n"
        "            setting.write(value)\n"
        "        print('WROTE', path)\n"
        "    except OSError as exc:\n"
        "        print('DENIED', path, exc.errno)\n"
    )
    outcome = run_sandboxed(python(code), tmp_path, timeout_s=60, isolation="bwrap")
    assert outcome.returncode == 0, outcome.stderr_tail
    assert "WROTE" not in outcome.stdout_tail and outcome.stdout_tail.count("DENIED") == 2, outcome.stdout_tail


@needs_bwrap
def test_the_users_credentials_are_hidden_from_a_child(tmp_path, monkeypatch):
    """A candidate that reads the Hub token could put it in an error message the archive publishes. The fake home
    lies outside /tmp, which the sandbox replaces anyway."""
    home = Path.home() / ".cache" / "kernel-archive-tests" / f"home-{secrets.token_hex(4)}"
    token_file = home / "elsewhere" / "hub-token"
    secrets_on_disk = [home / ".cache" / "huggingface" / "token", home / ".netrc", home / ".ssh" / "id_ed25519",
                       home / ".bash_history", token_file]  # fmt: skip
    for path in secrets_on_disk:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("hf_secret_on_disk")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HF_TOKEN_PATH", str(token_file))
    code = (
        "import sys\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        print('READ' if 'secret' in open(path).read() else 'EMPTY', path)\n"
        "    except OSError as exc:\n"
        "        print('DENIED', path, exc.errno)\n"
    )
    try:
        outcome = run_sandboxed(python(code, *map(str, secrets_on_disk)), tmp_path, 60, isolation="bwrap")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert outcome.returncode == 0, outcome.stderr_tail
    assert "READ" not in outcome.stdout_tail and outcome.stdout_tail.count("\n") == 5, outcome.stdout_tail


@needs_bwrap
def test_the_systems_password_hashes_are_hidden_from_a_root_child(tmp_path):
    """A child whose uid is root reads the files root owns (mode 0640 root:shadow) without any capability."""
    shadow = Path("/etc/shadow")
    if not shadow.exists() or os.geteuid() != 0:
        pytest.skip("no /etc/shadow here, or not root: the file's mode keeps it from the child")
    code = "import sys\nprint('SIZE', len(open(sys.argv[1]).read()))\n"
    outcome = run_sandboxed(python(code, str(shadow)), tmp_path, 60, isolation="bwrap")
    # In its place /dev/null, on a mount that allows no device: empty, or not opened at all.
    hidden = "SIZE 0" in outcome.stdout_tail or "PermissionError" in outcome.stderr_tail
    assert hidden and "SIZE" not in outcome.stdout_tail.replace("SIZE 0", ""), outcome.stdout_tail


def test_a_child_started_without_bwrap_dies_with_the_process_that_started_it(tmp_path):
    # A builder (an engine) killed while its child runs a candidate's endless loop: the child goes with it, as a
    # bwrap sandbox does (--die-with-parent), instead of burning a core for its CPU-time limit.
    builder = (
        "import sys, os\n"
        "from builder.verify.sandbox.process import SandboxedProcess\n"
        "child = SandboxedProcess([sys.executable, '-c', 'while True: pass'], sys.argv[1], gpu=False,\n"
        "                         isolation='process')\n"
        "print(child.pid, flush=True)\n"
        "os._exit(0)  # no clean-up: as a builder killed by SIGKILL\n"
    )
    done = subprocess.run([sys.executable, "-c", builder, str(tmp_path / "scratch")], capture_output=True, text=True,
                          cwd=config.REPO_ROOT, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    child = int(done.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and child_running(child):
        time.sleep(0.05)
    assert not child_running(child)


def child_running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_resolve_isolation_rejects_unknown_names():
    with pytest.raises(ValueError):
        sandbox.resolve_isolation("docker")
    assert sandbox.resolve_isolation("process") == "process"


def test_candidates_run_without_bubblewrap_are_named_in_one_warning_line(monkeypatch):
    monkeypatch.setattr(bubblewrap, "bwrap_usable", lambda: True)
    assert bubblewrap.weak_isolation_warning() is None
    assert bubblewrap.weak_isolation_warning("process") is not None  # asked for: said all the same
    monkeypatch.setattr(bubblewrap, "bwrap_usable", lambda: False)
    monkeypatch.setattr(bubblewrap.os, "geteuid", lambda: 0)
    as_root = bubblewrap.weak_isolation_warning()
    assert as_root is not None and as_root.startswith("warning: bubblewrap is not usable here") and "\n" not in as_root
    assert "anywhere on this machine, as root" in as_root
    monkeypatch.setattr(bubblewrap.os, "geteuid", lambda: 1000)
    assert "wherever this user can" in (bubblewrap.weak_isolation_warning() or "")
