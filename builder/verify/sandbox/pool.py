"""Pre-started one-shot evaluation processes (trusted parent side).

Starting an evaluation child costs seconds (Python, torch import, CUDA context). A pool keeps a few
children started: each has done its imports and CUDA init, and blocks reading one job path from stdin.
Under bubblewrap they are forked from a zygote that imported torch once, each into a sandbox of its own
(`forked.py`); otherwise, or where that fails, they are started as `python -m builder.verify.child.main -`.
Taking a process from the pool starts its replacement at once, so the next candidate's start-up overlaps
the current candidate's run. Each process still serves exactly one candidate and is killed with its whole
sandbox afterwards.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path

from builder import config
from builder.verify.protocol.entry_points import CHILD_MODULE
from builder.verify.sandbox.forked import (
    ForkedProcess,
    ForkFailed,
    acquire_zygote,
    give_up,
    release_zygote,
)
from builder.verify.sandbox.process import SandboxedProcess, resolve_isolation


def child_argv(job_arg: str, module: str = CHILD_MODULE) -> list[str]:
    return [sys.executable, "-m", module, job_arg]


class PooledChild:
    """A started child waiting for its job path on stdin, with the scratch dir it was started in."""

    def __init__(self, scratch: Path, process: SandboxedProcess) -> None:
        self.scratch = scratch
        self.process = process

    def discard(self) -> None:
        self.process.kill()  # a forked child's sandbox can outlive the child: it goes too
        shutil.rmtree(self.scratch, ignore_errors=True)


class EvalPool:
    """`size` children kept started for one evaluation worker. With `refill_after`, a taken child's replacement
    starts once that event is set (the build's first clean reference ended): every CUDA context's making and
    ending on the box goes through the driver one at a time, whichever GPU it is for (measured
    2026-11-26), so spares started beside the first references hold those references up. A worker takes its
    next child only after its first evaluation, which waits for a reference anyway."""

    def __init__(
        self,
        size: int,
        gpu: bool,
        env_extra: dict[str, str] | None = None,
        isolation: str | None = None,
        child_module: str = CHILD_MODULE,
        ro_binds: Sequence[str | Path] = (),
        fork: bool | None = None,  # None: config.FORK_EVALUATION_CHILDREN
        refill_after: threading.Event | None = None,
    ) -> None:
        self.size = max(1, size)
        self.gpu = gpu
        self.env_extra = dict(env_extra or {})
        self.isolation = isolation
        self.child_module = child_module
        # Only directories that exist now: the sandbox cannot bind a missing one, so a child started before a
        # directory appeared would not see what is later written there (its job must get a fresh child).
        self.ro_binds = [path for path in (Path(p).resolve() for p in ro_binds) if path.is_dir()]
        self._ready: deque[PooledChild] = deque()
        self._lock = threading.Lock()
        self._closed = False
        self._refill_after = refill_after
        self._closing = threading.Event()
        self.started_count = 0
        fork = config.FORK_EVALUATION_CHILDREN if fork is None else fork
        usable = fork and resolve_isolation(isolation) == "bwrap"
        self._zygote = acquire_zygote(child_module, self.env_extra) if usable else None
        self._fill()
        if refill_after is not None:
            threading.Thread(target=self._fill_once_set, daemon=True, name=f"ka-pool-refill-{id(self):x}").start()

    def _start_one(self) -> PooledChild:
        scratch = Path(tempfile.mkdtemp(prefix=config.SCRATCH_PREFIXES["evaluation"]))
        process = self._fork_one(scratch) or SandboxedProcess(
            child_argv("-", self.child_module),
            scratch,
            gpu=self.gpu,
            env_extra=self.env_extra,
            isolation=self.isolation,
            stdin_pipe=True,
            ro_binds=self.ro_binds,
        )
        self.started_count += 1
        return PooledChild(scratch, process)

    def _fork_one(self, scratch: Path) -> SandboxedProcess | None:
        """A child forked from the zygote into a sandbox of its own, or None: exec one (no bwrap, no zygote)."""
        if self._zygote is None:
            return None
        try:
            return ForkedProcess(self._zygote, scratch, self.gpu, self.env_extra, self.ro_binds)
        except ForkFailed as exc:
            give_up(self._zygote, str(exc))
            self._zygote = None
            return None

    def _died_before_its_job(self, dead: PooledChild) -> None:
        """A forked child that died while it started (its CUDA context, say) stops the forking: later children are
        exec'd, as they were before the zygote."""
        if isinstance(dead.process, ForkedProcess) and self._zygote is not None:
            give_up(self._zygote, f"a forked child died before its job: {dead.process.start_failure()}")
            self._zygote = None

    def _fill(self) -> None:
        with self._lock:
            while not self._closed and len(self._ready) < self.size:
                self._ready.append(self._start_one())

    def covers(self, paths: Iterable[str | Path | None]) -> bool:
        """Whether children started before the job can read these inputs (under bwrap /tmp is private,
        so inputs under /tmp must lie inside the pool's read-only binds)."""
        for raw in paths:
            if raw is None:
                continue
            path = Path(raw).resolve()
            if Path("/tmp") in path.parents and not any(root == path or root in path.parents for root in self.ro_binds):
                return False
        return True

    def take(self) -> PooledChild:
        """A started child (a fresh one if the waiting child died); its replacement starts now, or once
        `refill_after` is set."""
        with self._lock:
            if self._closed:
                raise RuntimeError("evaluation pool is closed")
            child = None
            while self._ready and child is None:
                candidate = self._ready.popleft()
                if candidate.process.alive():
                    child = candidate
                else:
                    self._died_before_its_job(candidate)
                    candidate.discard()
            if child is None:
                child = self._start_one()
        if self._refill_after is None or self._refill_after.is_set():
            self._fill()
        return child

    def _fill_once_set(self) -> None:
        """The pool's refill thread: the replacements taken before `refill_after` was set, once it is; then it
        waits for the pool to close. A forked child's sandbox dies with the thread that started it (bwrap
        --die-with-parent: the parent-death signal follows the starting thread), so this thread outlives every
        child it started."""
        assert self._refill_after is not None
        while not self._refill_after.wait(0.1):
            if self._closing.is_set():
                return
        self._fill()  # nothing once the pool is closed
        self._closing.wait()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._closing.set()
            while self._ready:
                self._ready.popleft().discard()
            if self._zygote is not None:
                release_zygote(self.child_module, self.env_extra)
                self._zygote = None

    def __enter__(self) -> EvalPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- one evaluation child: job file in, result file out (contract in docs/architecture.md) ----------
