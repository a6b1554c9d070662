"""Exit codes and the errors the CLI turns into one-line messages."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1  # the command ran but could not finish its work (e.g. a failed upload)
    USAGE = 2  # bad arguments or input: missing file, unknown task, malformed suite
    NO_GPU = 3  # a CUDA-only command on a machine without a GPU
    INFRASTRUCTURE = 75  # the builder's own machinery failed (sandbox, compiler, disk, device): nothing was stored
    INTERNAL = 70  # a bug: reported in one line, traceback only with KA_DEBUG=1


class ArchiveError(Exception):
    """An expected failure with a one-line message for the user."""

    exit_code = ExitCode.FAILURE


class UsageError(ArchiveError):
    exit_code = ExitCode.USAGE


class TaskError(UsageError):
    """A task file or suite that cannot be used (names the file and the problem)."""


class NoGpuError(ArchiveError):
    exit_code = ExitCode.NO_GPU


class InfrastructureError(ArchiveError):
    """The builder's own machinery cannot verify kernels here (its sandbox, interpreter, compiler, disk or device):
    the verdicts it would give are not the kernels', so the command stops without storing them."""

    exit_code = ExitCode.INFRASTRUCTURE


PREFLIGHT_FAILED = "preflight failed, nothing was verified or stored"  # how a failed control kernel's line begins
