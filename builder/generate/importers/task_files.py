"""Task files written from the reference code an imported row carries.

Imported kernels bring the program they were verified against; it is written under the build directory
as `levelL/N_name.py`, so the verifier calls `model(*inputs, fn=ext.forward)` exactly as for built-in
tasks. Rows of one task id that disagree on that program get one task file per variant.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from builder.candidates import Candidate
from builder.errors import UsageError
from builder.generate.importers.common import task_name
from builder.tasks import Task
from builder.tasks.suite import describe_task_file

CODE_DIGEST_CHARS = 12  # enough to tell the variants of one task apart


class ImportedTaskFiles:
    """Writes each distinct (task id, program) once; `notes` says why a program is not a usable task."""

    def __init__(self, root: Path, suite: str, notes: list[str]):
        self.root = Path(root)
        self.suite = suite
        self.notes = notes
        self.first: dict[str, Task] = {}  # task id -> first variant
        self._variants: dict[tuple[str, str], Task | None] = {}  # (task id, code hash) -> task

    def task(self, level: int, number: int, name: str, code: str) -> Task | None:
        task_id = f"{level}/{number}"
        digest = hashlib.sha256(code.encode()).hexdigest()[:CODE_DIGEST_CHARS]
        if (task_id, digest) in self._variants:
            return self._variants[(task_id, digest)]
        variant = sum(1 for tid, _ in self._variants if tid == task_id)
        folder = self.root if variant == 0 else self.root / f"variant{variant}"
        path = folder / f"level{level}" / f"{number}_{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code)
        task: Task | None
        try:
            task = describe_task_file(path, level=level, number=number, suite=self.suite)
        except UsageError as exc:
            self.notes.append(f"task {task_id}: the reference code is not a task file ({exc})")
            task = None
        if task is not None and not task.has_functional:
            self.notes.append(f"task {task_id}: the reference code lacks module_fn or Model.forward(..., fn=module_fn)")
            task = None
        self._variants[(task_id, digest)] = task
        if task is not None:
            self.first.setdefault(task_id, task)
        return task


class RowFileImport:
    """An importer that reads rows from files, each row a candidate and its task file, or a note saying why not.
    Subclasses say which files (`files`), how rows are read (`rows`) and what a row becomes (`_row`)."""

    def __init__(self, source: Path, label: str, out_dir: Path, backend: str, levels: list[int] | None = None):
        self.source = source
        self.label = label
        self.backend = backend
        self.levels = levels
        self.notes: list[str] = []
        self.task_by_ref: dict[str, Task] = {}
        self.task_files = ImportedTaskFiles(
            Path(out_dir) / "imported_tasks" / task_name(label), f"import:{label}", self.notes
        )

    @property
    def tasks(self) -> dict[str, Task]:
        """Task id -> the first variant of its task."""
        return self.task_files.first

    def files(self) -> list[Path]:
        raise NotImplementedError

    def rows(self, path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
        raise NotImplementedError

    def _row(self, path: Path, index: int, row: dict[str, Any]) -> Candidate | None:
        raise NotImplementedError

    def candidates(self) -> list[Candidate]:
        out: list[Candidate] = []
        for path in self.files():
            for index, row in self.rows(path):
                candidate = self._row(path, index, row)
                if candidate is not None:
                    out.append(candidate)
        return out
