"""What a failure of the builder's own machinery looks like in what a child left behind (trusted parent side).

A sandbox that cannot start, an interpreter it cannot see, a missing or killed compiler, a full disk, a CUDA
context that cannot be made or a lost device say nothing about the kernel being verified. These texts pass through
candidate code, which may print anything, so they make a failure only *suspected*; the control kernel decides
(`engine/infrastructure.py`)."""

from __future__ import annotations

import re
import signal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from builder.verify.sandbox.process import ChildOutcome

# (what failed, a line of a log or error text that says so). The first match names the failure.
SUSPECT_LINES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (what, re.compile(pattern, re.MULTILINE))
    for what, pattern in (
        ("the sandbox did not start", r"^.*\bbwrap: .*$"),
        ("the sandbox hides the interpreter", r"^.*ka-sandbox: .* is not in the sandbox$"),
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


def suspect_text(text: str | None) -> str | None:
    """What failed and the line that says so, where a text names a failure of the machinery; else None."""
    for what, pattern in SUSPECT_LINES:
        if text and (match := pattern.search(text)):
            return f"{what}: {match.group(0).strip()[:LINE_CHARS]}"
    return None


def compile_suspect(outcome: ChildOutcome, data: dict[str, Any] | None) -> str | None:
    """Why a compile child's failure looks like the machinery's, or None. `data` is its result file (None: it
    wrote none, not even the one it writes as it starts, so the interpreter never ran `child/build.py`)."""
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
