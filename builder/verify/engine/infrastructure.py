"""Failures of the builder's own machinery, told apart from the candidate's (trusted parent side).

A sandbox that cannot start, an interpreter it cannot see, a missing or killed compiler, a full disk, a CUDA
context that cannot be made or a lost device say nothing about the kernel being verified. Such a failure is
first only *suspected*, from what the child left behind (`compile_suspect`, `child_suspect`, `suspect_text`):
those texts pass through candidate code, which may print anything. The control kernel decides
(`preflight.confirm`): where it fails too, the failure is the machinery's and becomes an `InfrastructureFailure`,
which no one stores or caches (the build puts the pair back and stops after a few in a row); where it passes, the
failure is the candidate's own and is recorded as before.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from builder.candidates import Candidate
    from builder.tasks import Task
    from builder.verify.sandbox.process import ChildOutcome

# (what failed, a line of a log or error text that says so). The first match names the failure.
SUSPECT_LINES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (what, re.compile(pattern, re.MULTILINE))
    for what, pattern in (
        ("the sandbox did not start", r"^.*\bbwrap: .*$"),
        ("the sandbox's interpreter cannot import the builder or torch",
         r"^.*No module named '?(?:torch|schemas|builder(?:\.[\w.]+)?)'?$"
         r"|^.*Error while finding module specification for 'builder\..*$"),
        ("no space left on the device", r"^.*(?:No space left on device|\[Errno 28\]|ENOSPC).*$"),
        ("the compiler was killed by a signal",
         r"^.*(?:Killed signal terminated program|died due to signal|ka-compiler: .* killed by signal"
         # a tool run for its version or a check: a signal's death, directly or through a shell (128 + signal)
         r"|returned non-zero exit status (?:129|1[3-8]\d|19[0-2])\b|died with <Signals\.SIG\w+).*$"),
        ("a compiler or build tool is missing",
         r"^.*(?:Ninja is required|No such file or directory: '(?:c\+\+|g\+\+|gcc|cc|clang\+\+|nvcc|ninja)'"
         r"|(?:c\+\+|g\+\+|nvcc|ninja): (?:command )?not found|CUDA_HOME environment variable is not set"
         r"|ka-compiler: no compiler).*$"),
        ("a CUDA context could not be made",
         r"^.*(?:no CUDA-capable device is detected|CUDA driver initialization failed|cudaErrorInitializationError"
         r"|CUDA error: initialization error|busy or unavailable|cudaErrorDevicesUnavailable"
         r"|CUDA driver version is insufficient|cudaErrorNoDevice).*$"),
        ("the device was lost", r"^.*(?:fallen off the bus|GPU is lost|cudaErrorDeviceUninitialized"
                                r"|cudaErrorSystemNotReady|unrecoverable ECC).*$"),
    )
)  # fmt: skip
LINE_CHARS = 300  # of the line quoted in a reason


@dataclass
class InfrastructureFailure:
    """What a stream yields for a pair whose verification the machinery failed: no record, and no verdict."""

    candidate: Candidate
    task: Task
    reason: str

    # The identity a stream's consumers key records by (engine processes, the orchestrator).
    @property
    def task_id(self) -> str:
        return self.task.id

    @property
    def kernel_id(self) -> str:
        return self.candidate.kernel_id

    @property
    def kernel_name(self) -> str:
        return self.candidate.kernel_name


def suspect_text(text: str | None) -> str | None:
    """What failed and the line that says so, where a text names a failure of the machinery; else None."""
    for what, pattern in SUSPECT_LINES:
        if text and (match := pattern.search(text)):
            return f"{what}: {match.group(0).strip()[:LINE_CHARS]}"
    return None


def compile_suspect(outcome: ChildOutcome, data: dict[str, Any] | None) -> str | None:
    """Why a compile child's failure looks like the machinery's, or None. `data` is its result file (None: it
    wrote none, not even the one it writes as it starts, so the interpreter never ran `compile_child`)."""
    if outcome.timed_out:
        return None  # a compile that runs past its limit is the source's (nothing is cached for it either)
    if outcome.signal in (signal.SIGKILL, signal.SIGTERM):
        return f"the compile process was killed by {signal.Signals(outcome.signal).name} (out of memory?)"
    if data is None:
        line = (outcome.stderr_tail.strip().splitlines() or ["no output"])[-1][:LINE_CHARS]
        return suspect_text(outcome.stderr_tail) or f"the compile process did not start ({outcome.describe()}): {line}"
    if data.get("provisional"):  # it started, and ended during the build or the module's loading
        return suspect_text(outcome.stderr_tail)
    if data.get("ok"):
        return None
    return suspect_text(str(data.get("error") or ""))


def child_suspect(outcome: ChildOutcome, result: dict[str, Any] | None) -> str | None:
    """Why an evaluation or reference child's failure looks like the machinery's, or None: it never started (its
    sandbox, its interpreter), it could not make its CUDA context, the device went away, the disk is full."""
    if outcome.timed_out:
        return None
    if result is None:
        return suspect_text(outcome.stderr_tail)
    if result.get("status") in ("runtime_error", "crash"):
        return suspect_text(str(result.get("error") or ""))
    return None


def machinery_fails(suspect: str, options: Any, since: float) -> str | None:
    """The reason a suspected failure is the machinery's, where the control kernel, compiled afresh, fails too
    (`preflight.confirm`); None where it passes: the failure is the candidate's own."""
    from builder.verify.engine.preflight import confirm

    control = confirm(options, since)
    return None if control is None else f"{suspect} (and {control})"
