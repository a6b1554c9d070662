"""The control kernel: a known-good candidate run through the real machinery (trusted parent side).

`preflight` runs it before a verify's or a re-verification's first candidate; a build runs it as its stream's
first pair instead (`StreamControl`), so that it is built beside the first candidates, and stores nothing until it
has passed. Compiled and evaluated in the sandbox the candidates get, it must come out `correct`, or the command
stops with one line and `ExitCode.INFRASTRUCTURE` before anything is stored. There is no fallback to weaker
isolation: a sandbox that bwrap's probe accepts but that cannot run a known-good kernel is a broken machine, and a
build under other isolation than the one chosen would store records that say otherwise. A pass is remembered per
environment (`fingerprint`: interpreter, checkout, builder version, torch, toolchain, isolation, device), so a later
run costs nothing.

`confirm` runs it again, freshly compiled, when a candidate's failure looks like the machinery's
(`infrastructure.machinery_fails`, given `confirm` by the engine): where the control fails too, the machinery is at fault; where it passes, the candidate is.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from builder import config
from builder.candidates import Candidate
from builder.errors import PREFLIGHT_FAILED, InfrastructureError
from builder.tasks import Task, resolve_task
from builder.verify import environment
from builder.verify.engine.clean_reference import ReferenceCache
from builder.verify.engine.one_kernel import compile_candidate, start_evaluation
from builder.verify.options import VerifyOptions
from builder.verify.sandbox.bubblewrap import hidden_paths, resolve_isolation

_checks: dict[tuple[str, int], tuple[float, str | None]] = {}  # (backend, device): (when the last began, its answer)
_checks_lock = threading.Lock()


def control_pair(backend: str) -> tuple[Candidate, Task]:
    path = config.INFRA_CONTROL_FILES[backend]
    task = resolve_task(str(config.INFRA_CONTROL_TASK_FILE))
    return Candidate.from_file(path, task.id, kernel_name="control", generator=config.INFRA_CONTROL_GENERATOR), task


def run_control(options: VerifyOptions, fresh: bool) -> str | None:
    """None where the control kernel comes out correct with these options, else why not (one line). `fresh`:
    compiled anew in a build cache of its own (the compiler is part of what is checked), else from the usual one."""
    candidate, task = control_pair(options.backend)
    scratch = Path(tempfile.mkdtemp(prefix="ka-control-")) if fresh else None
    # The control's own failures are what is asked about: never confirmed against itself.
    options = replace(options, profile=False, seeds=None, suspects_are_own=True,
                      build_cache_dir=scratch or options.build_cache_dir).with_seeds()  # fmt: skip
    where = _control_named(options.backend, task)
    try:
        compiled = compile_candidate(candidate, task, options)
        if not compiled.ok:
            return f"{where} did not compile: {compiled.infrastructure or _first_line(compiled.error)}"
        evaluated = start_evaluation(compiled, candidate, task, options, None, ReferenceCache())
    except OSError as exc:
        return f"{where} could not be run: {exc}"
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    status = evaluated.record.status if evaluated.record is not None else evaluated.status
    error = evaluated.record.error if evaluated.record is not None else evaluated.error
    return None if status == "correct" else f"{where} came out {status}: {_first_line(error)}"


def _control_named(backend: str, task: Task) -> str:
    return f"the control kernel ({config.INFRA_CONTROL_FILES[backend].name} on task {task.id})"


def _first_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    interesting = [line for line in lines if line.startswith(("bwrap:", "ka-compiler:")) or "rror" in line]
    return (interesting or lines or ["no message"])[0][:300]


def fingerprint(options: VerifyOptions) -> str:
    """What a control kernel's pass holds for: the same interpreter and checkout, builder version, torch,
    toolchain, isolation, secrets hidden and device."""
    device = environment.gpu_info(options.device_index) if options.backend == "cuda" else None
    material = [sys.executable, sys.prefix, str(config.REPO_ROOT), environment.builder_version(),
                list(environment.torch_versions()), environment.toolchain(options.backend), options.backend,
                resolve_isolation(options.isolation), shutil.which("bwrap"), [str(p) for p in hidden_paths()],
                device, os.environ.get("CUDA_VISIBLE_DEVICES"), tempfile.gettempdir()]  # fmt: skip
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()


def _marker(options: VerifyOptions) -> Path:
    return config.CACHE_DIR / config.PREFLIGHT_CACHE_SUBDIR / f"{fingerprint(options)[:32]}.json"


def passed_lately(options: VerifyOptions) -> bool:
    """Whether the control kernel passed in this environment within `PREFLIGHT_MAX_AGE_S`."""
    try:
        return time.time() - json.loads(_marker(options).read_text())["passed_at"] < config.PREFLIGHT_MAX_AGE_S
    except (OSError, ValueError, KeyError, TypeError):
        return False


def remember_pass(options: VerifyOptions) -> None:
    marker = _marker(options)
    marker.parent.mkdir(parents=True, exist_ok=True)
    partial = marker.with_name(f"{marker.name}.{os.getpid()}")
    partial.write_text(json.dumps({"passed_at": time.time(), "executable": sys.executable}))
    os.replace(partial, marker)


def preflight(options: VerifyOptions) -> None:
    """Run the control kernel unless it passed in this environment lately; InfrastructureError where it fails."""
    if passed_lately(options):
        return
    reason = run_control(options, fresh=False)
    if reason is not None:
        raise InfrastructureError(f"{PREFLIGHT_FAILED}: {reason}")
    remember_pass(options)


@dataclass(frozen=True)
class StreamControl:
    """The control kernel as the first pair of a build's stream, with the stream's own options: it is built beside
    the first candidates instead of before them. Whoever consumes the stream holds every other outcome until the
    control's has come (`judge`), and stores nothing where it did not pass."""

    candidate: Candidate
    task: Task
    options: VerifyOptions

    @classmethod
    def unless_passed_lately(cls, options: VerifyOptions) -> StreamControl | None:
        if passed_lately(options):
            return None
        candidate, task = control_pair(options.backend)
        return cls(candidate, task, options)

    @property
    def key(self) -> tuple[str, str]:
        return self.task.id, self.candidate.kernel_id

    def judge(self, outcome: Any) -> None:
        """The control's record, or the InfrastructureFailure the stream gave for it: remembered where it came out
        `correct` (every record, flags aside, is judged by its status, as `run_control` judges), else
        InfrastructureError."""
        where = _control_named(self.options.backend, self.task)
        status = getattr(outcome, "status", None)
        if status is None:  # an InfrastructureFailure: the machinery failed the control
            raise InfrastructureError(f"{PREFLIGHT_FAILED}: {where} could not be verified: {outcome.reason}")
        if status != "correct":
            raise InfrastructureError(f"{PREFLIGHT_FAILED}: {where} came out {status}: {_first_line(outcome.error)}")
        remember_pass(self.options)


def confirm(options: VerifyOptions, since: float) -> str | None:
    """Whether the machinery fails now: why the freshly compiled control kernel fails, or None where it passes.
    One check at a time per device; a check that began after `since` (time.monotonic() as the suspect run
    began) answers for it too, so many candidates failing at once cost one control."""
    key = (options.backend, options.device_index)
    with _checks_lock:
        began, answer = _checks.get(key, (float("-inf"), None))
        if began >= since:
            return answer
        began = time.monotonic()
        answer = run_control(options, fresh=True)
        _checks[key] = (began, answer)
        return answer
