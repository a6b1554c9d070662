"""Give a task without a functional form one, written by the LLM and checked before use.

External KernelBench tasks define `Model.forward(x)` with the computation inline, but our candidates
are verified through `model(*inputs, fn=ext.forward)`. The LLM rewrites the task file into functional
form; it is accepted only if, under the same seeds, it builds the same inputs and its
`Model(...)(*inputs, fn=module_fn)` matches the original module's output. That check executes
LLM-written Python, so it runs in a sandboxed child (builder.verify.sandbox.process when present; until then a
subprocess in its own session with a scrubbed environment, its scratch dir as cwd and HOME, and a
process-group kill on timeout).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from builder import config
from builder.errors import UsageError
from builder.tasks import Task
from builder.tasks.suite import describe_task_file

CHILD_MODULE = "builder.generate.llm.functional_child"


@dataclass(frozen=True)
class FunctionalCheck:
    ok: bool
    reason: str | None = None
    isolation: str | None = None


def _run_fallback(argv: list[str], scratch: Path, timeout_s: float) -> tuple[int | None, str, str]:
    env = {k: v for k, v in os.environ.items() if k in config.SANDBOX_ENV_ALLOW}
    env["HOME"] = str(scratch)
    proc = subprocess.Popen(
        argv, cwd=scratch, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, text=True
    )
    try:
        _, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, "process", "timed out"
    return proc.returncode, "process", stderr[-config.LOG_TAIL_BYTES :]


def _run_child(argv: list[str], scratch: Path, timeout_s: float, binds: tuple[Path, ...], gpu: bool):
    try:
        from builder.verify.sandbox.process import run_sandboxed
    except ImportError:
        return _run_fallback(argv, scratch, timeout_s)
    outcome = run_sandboxed(argv, scratch, timeout_s, extra_binds=binds, gpu=gpu)
    if outcome.timed_out:
        return None, outcome.isolation, "timed out"
    return outcome.returncode, outcome.isolation, outcome.stderr_tail or ""


def check_functional_form(
    original: Task,
    candidate_path: Path,
    backend: str,
    timeout_s: float = config.FUNCTIONAL_CHECK_TIMEOUT_S,
    seeds: list[int] | None = None,
) -> FunctionalCheck:
    """Run the comparison in a sandboxed child and report whether the functional form is accepted."""
    try:  # the file's shape is checked by parsing alone (no code runs) before a child is spent on it
        described = describe_task_file(Path(candidate_path))
    except UsageError as exc:
        return FunctionalCheck(False, str(exc))
    if not described.has_functional:
        return FunctionalCheck(False, "no module_fn, or Model.forward lacks fn=module_fn")
    atol, rtol = original.tolerances()
    with tempfile.TemporaryDirectory(prefix="ka-functional-") as tmp:
        scratch = Path(tmp)
        job = {
            "original": str(original.path),
            "candidate": str(Path(candidate_path).resolve()),
            "seeds": seeds or list(range(1, config.FUNCTIONAL_CHECK_SEEDS + 1)),
            "size": "cpu" if backend == "cpu" else "full",
            "device": "cuda" if backend == "cuda" else "cpu",
            "atol": atol,
            "rtol": rtol,
            "result_path": str(scratch / "result.json"),
        }
        (scratch / "job.json").write_text(json.dumps(job))
        argv = [sys.executable, "-m", CHILD_MODULE, str(scratch / "job.json")]
        binds = (original.path.parent, Path(candidate_path).resolve().parent)
        returncode, isolation, stderr = _run_child(argv, scratch, timeout_s, binds, gpu=backend == "cuda")
        if returncode is None:
            return FunctionalCheck(False, f"check timed out after {timeout_s:.0f} s", isolation)
        try:
            result = json.loads((scratch / "result.json").read_text())
        except (OSError, ValueError):
            tail = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit code {returncode}"
            return FunctionalCheck(False, f"check child died: {tail}", isolation)
    return FunctionalCheck(bool(result.get("ok")), result.get("reason"), isolation)


def write_functional_task(original: Task, code: str, out_dir: Path, attempt: int = 0) -> Path:
    """Store an LLM-written functional form where the verifier can read it (build dir, never data/)."""
    folder = Path(out_dir) / "functional_tasks" / f"level{original.level}"
    folder.mkdir(parents=True, exist_ok=True)
    suffix = f"_try{attempt}" if attempt else ""
    path = folder / f"{original.number}_{original.name}{suffix}.py"
    path.write_text(code)
    return path


def accepted_task(original: Task, path: Path) -> Task:
    """The Task the verifier uses from now on: the original's id and suite, the new file."""
    described = describe_task_file(path, level=original.level, number=original.number, suite=original.suite)
    from dataclasses import replace

    return replace(described, name=original.name)
