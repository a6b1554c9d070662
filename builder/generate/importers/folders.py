"""Import folders of kernels written elsewhere, mapped onto the build's tasks.

KernelBench generation folders: KernelBench's own file naming,
`level_<L>_problem_<P>_sample_<S>_kernel.py` (anywhere below the folder), or
`level<L>/<P>_<anything>.py`; each file is a `ModelNew` (language python) for task L/P of the suite
the build uses (`--suite` for an external KernelBench checkout).

Plain folders of `.cu` (or `.cpp`) files with `manifest.json`, mapping each file to a task id and,
optionally, the claims made for it:

    {"gemm_fast.cu": "2/1",
     "matmul_v3.cu": {"task": "1/1", "claimed_correct": true, "claimed_speedup": 2.4, "model": "x"}}
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from builder.candidates import Candidate, language_of
from builder.errors import UsageError
from builder.generate.importers.common import parse_bool, parse_float
from builder.tasks import Task

KERNELBENCH_FLAT = re.compile(r"^level_?(\d+)_problem_(\d+)(?:_sample_(\d+))?(?:_\w+)?\.py$")
KERNELBENCH_NESTED_DIR = re.compile(r"^level_?(\d+)$")
KERNELBENCH_NESTED_FILE = re.compile(r"^(\d+)_\w*\.py$")
TASK_ID = re.compile(r"^\d+/\d+$")
MANIFEST_KEYS = {"task", "claimed_correct", "claimed_speedup", "model"}


def is_kernelbench_folder(folder: Path) -> bool:
    return any(_kernelbench_task(p) for p in folder.rglob("*.py"))


def _kernelbench_task(path: Path) -> str | None:
    flat = KERNELBENCH_FLAT.match(path.name)
    if flat:
        return f"{int(flat.group(1))}/{int(flat.group(2))}"
    nested = KERNELBENCH_NESTED_DIR.match(path.parent.name)
    file = KERNELBENCH_NESTED_FILE.match(path.name)
    if nested and file:
        return f"{int(nested.group(1))}/{int(file.group(1))}"
    return None


def kernelbench_candidates(folder: Path, tasks: Sequence[Task], label: str, notes: list[str]) -> list[Candidate]:
    by_id = {t.id: t for t in tasks}
    out: list[Candidate] = []
    for path in sorted(folder.rglob("*.py")):
        task_id = _kernelbench_task(path)
        if task_id is None:
            continue
        relative = path.relative_to(folder)
        if task_id not in by_id:
            notes.append(f"{relative}: task {task_id} is not among this build's tasks")
            continue
        source = path.read_text(errors="replace")
        if "class ModelNew" not in source:
            notes.append(f"{relative}: no ModelNew class")
            continue
        out.append(
            Candidate(
                task_id=task_id,
                source=source,
                language="python",
                kernel_name=path.stem,
                generator="import",
                source_ref=f"{label}:{relative}",
            )
        )
    return out


def _manifest_entry(manifest: Path, name: str, value: object) -> dict:
    entry = {"task": value} if isinstance(value, str) else value
    if not isinstance(entry, dict) or not isinstance(entry.get("task"), str) or not TASK_ID.match(entry["task"]):
        raise UsageError(f'{manifest}: {name}: expected a task id like "1/3" or {{"task": "1/3", ...}}')
    unknown = sorted(set(entry) - MANIFEST_KEYS)
    if unknown:
        raise UsageError(f"{manifest}: {name}: unknown key(s) {', '.join(unknown)}")
    return entry


def manifest_candidates(
    folder: Path, tasks: Sequence[Task], backend: str, label: str, notes: list[str]
) -> list[Candidate]:
    manifest = folder / "manifest.json"
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{manifest}: unreadable or not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{manifest}: expected an object mapping file names to task ids")
    by_id = {t.id: t for t in tasks}
    out: list[Candidate] = []
    for name, value in data.items():
        entry = _manifest_entry(manifest, name, value)
        path = folder / name
        if not path.is_file():
            raise UsageError(f"{manifest}: {name} is listed but {path} does not exist")
        try:
            language = language_of(path)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if language == "cuda" and backend != "cuda":
            notes.append(f"{name}: CUDA kernel needs the cuda backend")
            continue
        if entry["task"] not in by_id:
            notes.append(f"{name}: task {entry['task']} is not among this build's tasks")
            continue
        out.append(
            Candidate.from_file(
                path,
                task_id=entry["task"],
                generator="import",
                source_ref=f"{label}:{name}",
                model=entry.get("model"),
                claimed_correct=parse_bool(entry.get("claimed_correct")),
                claimed_speedup=parse_float(entry.get("claimed_speedup")),
            )
        )
    listed = set(data)
    for file in sorted(folder.iterdir()):
        if file.suffix in (".cu", ".cpp", ".cc") and file.name not in listed:
            raise UsageError(f"{file}: kernel file not listed in {manifest.name}")
    return out
