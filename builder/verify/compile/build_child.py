"""Where a build's compile child runs: forked from a build zygote, or exec'd (trusted parent side).

An exec'd compile child spends seconds of a core importing torch before nvcc starts: a forked one built the same
candidate in 2.9 s and 2.7 core-s less, of about 25 (docs/benchmarks.md). A build zygote (`sandbox/zygote.py`,
with the build module's `before_fork`) imports torch once, never builds anything itself, and forks each build's
child into a bubblewrap sandbox of its own, with the binds an exec'd child gets (its build directory writable,
nothing else of the builder's): the same `child/build.py` runs there, loads the candidate's module, and its
load-time code sees only that sandbox.

A compile stage holds the zygote for its stream (`held_build_zygote`): its start begins with the stream, before
the first build is read, and it is not ended and started again between two builds. A build waits for the zygote
while it starts (an exec'd child would spend that time on the same imports). A build outside a stream (one
candidate's, a test's) is exec'd: a zygote started and ended for one build would cost more than it saves. So is
every build where there is no bubblewrap, or the zygote could not start or a child could not join its sandbox
(`forked.started_zygote`, `give_up`).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from builder import config
from builder.verify import milestones
from builder.verify.protocol.entry_points import BUILD_MODULE
from builder.verify.sandbox.bubblewrap import resolve_isolation
from builder.verify.sandbox.forked import (
    ForkedProcess,
    ForkFailed,
    give_up,
    release_zygote,
    running_zygote,
    start_zygote_soon,
    started_zygote,
)
from builder.verify.sandbox.process import ChildOutcome, SandboxCancelled, run_sandboxed


def forks(isolation: str | None) -> bool:
    """Whether compile children are forked from a zygote here (bubblewrap, and `FORK_COMPILE_CHILDREN`)."""
    return config.FORK_COMPILE_CHILDREN and resolve_isolation(isolation) == "bwrap"


def run_build_child(job_path: Path, scratch: Path, timeout_s: float, build_dir: Path, env: dict[str, str],
                    isolation: str | None, cancel: threading.Event | None) -> ChildOutcome:  # fmt: skip
    """Run `child/build.py` on `job_path` to its end or `timeout_s`, forked where a stream holds a usable build zygote,
    else exec'd; its build directory is its only writable path besides `scratch`. SandboxCancelled once `cancel` is set."""
    zygote = started_zygote(BUILD_MODULE, env) if forks(isolation) else None  # a stream's, up or starting
    child: ForkedProcess | None = None
    if zygote is not None:
        try:
            child = ForkedProcess(zygote, scratch, gpu=False, env_extra=env, extra_binds=[build_dir])
        except ForkFailed as exc:
            give_up(zygote, str(exc))  # this build and later ones are exec'd
    try:
        if child is None:
            return run_sandboxed([sys.executable, "-m", BUILD_MODULE, str(job_path)], scratch, timeout_s,
                                 extra_binds=[build_dir], gpu=False, env_extra=env, isolation=isolation,
                                 cancel=cancel)  # fmt: skip
        try:
            if cancel is not None and cancel.is_set():
                raise SandboxCancelled("stopped before the start")
            milestones.mark("first_build_forked")
            child.send(str(job_path))
            return child.wait(timeout_s, cancel)
        except BaseException:
            child.kill()
            raise
    finally:
        if zygote is not None:
            release_zygote(BUILD_MODULE, env)


def zygote_is_up(env: dict[str, str]) -> bool:
    """Whether the build zygote for `env` is up now (started, and usable)."""
    if running_zygote(BUILD_MODULE, env) is None:
        return False
    release_zygote(BUILD_MODULE, env)
    return True


@contextmanager
def held_build_zygote(env: dict[str, str], isolation: str | None) -> Iterator[None]:
    """Hold the build zygote for `env` while the block runs, its start begun at once in the background (a build
    waits for it from here on). A block that ends first (a stream whose builds were all in the cache) does not wait
    for the start: the zygote is given back as soon as it is up."""
    if not forks(isolation):
        yield
        return
    start_zygote_soon(BUILD_MODULE, env)
    lock = threading.Lock()
    state = {"held": False, "ended": False}

    def hold() -> None:
        if started_zygote(BUILD_MODULE, env) is None:
            return
        with lock:
            state["held"] = not state["ended"]
        if not state["held"]:
            release_zygote(BUILD_MODULE, env)

    threading.Thread(target=hold, daemon=True, name="ka-build-zygote").start()
    try:
        yield
    finally:
        with lock:
            state["ended"] = True
            held = state["held"]
        if held:
            release_zygote(BUILD_MODULE, env)
