"""Import datasets in the 18-column schema of the best-known public archive ("sakana").

Each row holds a kernel (`CUDA_Code`) and its task (`PyTorch_Code_Functional`: a `module_fn` plus a
`Model` whose `forward(..., fn=module_fn)` calls it, with `get_inputs`/`get_init_inputs`). The
functional code is written to a task file under the build directory, so the verifier calls
`model(*inputs, fn=ext.forward)` exactly as for built-in tasks. Rows keep the archive's claims:
`Correct` -> claimed_correct, `CUDA_Speedup_Native` -> claimed_speedup.

Exports written before `PyTorch_Code_Functional` held the whole program (it held only `module_fn`) are
read through `PyTorch_Code_Module`, which held the whole task file.

Rows are read from Parquet or JSON Lines files (a file, a folder of them, or a Hub dataset snapshot).
Rows of one (level, task) that disagree on the functional code get one task file per variant.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from builder.candidates import Candidate
from builder.errors import UsageError
from builder.generate.importers.common import detect_language, parse_bool, parse_float, task_name
from builder.generate.importers.task_files import RowFileImport
from builder.tasks.suite import is_functional_program
from schemas import sakana_mapping

ROW_FILE_SUFFIXES = (".parquet", ".jsonl")
REQUIRED_COLUMNS = ("Level_ID", "Task_ID", "Op_Name", "CUDA_Code", "PyTorch_Code_Functional", "Correct")


def row_files(source: Path) -> list[Path]:
    if source.is_file():
        if source.suffix not in ROW_FILE_SUFFIXES:
            raise UsageError(f"{source}: expected a .parquet or .jsonl file in the 18-column schema")
        return [source]
    files = sorted(p for p in source.rglob("*") if p.is_file() and p.suffix in ROW_FILE_SUFFIXES)
    if not files:
        raise UsageError(f"{source}: no .parquet or .jsonl files")
    return files


def _check_columns(path: Path, columns: list[str]) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        known = set(sakana_mapping())
        hint = "" if known & set(columns) else " (not the 18-column schema)"
        raise UsageError(f"{path}: missing column(s) {', '.join(missing)}{hint}")


def read_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row index, row dict) of one file, streamed."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            parquet = pq.ParquetFile(path)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
            raise UsageError(f"{path}: unreadable Parquet ({exc})") from None
        _check_columns(path, parquet.schema_arrow.names)
        index = 0
        for batch in parquet.iter_batches(batch_size=256):
            for row in batch.to_pylist():
                yield index, row
                index += 1
        return
    with path.open() as handle:
        checked = False
        for index, line in enumerate(handle):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise UsageError(f"{path}:{index + 1}: not a JSON object") from None
            if not isinstance(row, dict):
                raise UsageError(f"{path}:{index + 1}: not a JSON object")
            if not checked:
                _check_columns(path, list(row))
                checked = True
            yield index, row


def functional_program(row: dict[str, Any]) -> str | None:
    """The row's whole functional program: `PyTorch_Code_Functional`, or, where that column holds only a
    `module_fn` (exports written before it held the program), `PyTorch_Code_Module` when that is one."""
    functional = row.get("PyTorch_Code_Functional")
    if not functional or not str(functional).strip():
        return None
    functional = str(functional)
    module = row.get("PyTorch_Code_Module")
    if not is_functional_program(functional) and module and is_functional_program(str(module)):
        return str(module)
    return functional


class SakanaImport(RowFileImport):
    """Turns rows into candidates and task files; `notes` says why any row was left out."""

    def files(self) -> list[Path]:
        return row_files(self.source)

    def rows(self, path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
        return read_rows(path)

    def _row(self, path: Path, index: int, row: dict[str, Any]) -> Candidate | None:
        where = f"{path.name} row {index}"
        try:
            level, number = int(row["Level_ID"]), int(row["Task_ID"])
        except (TypeError, ValueError):
            self.notes.append(f"{where}: Level_ID/Task_ID are not integers")
            return None
        if self.levels and level not in self.levels:
            return None
        code = row.get("CUDA_Code")
        functional = functional_program(row)
        if not code or not str(code).strip():
            self.notes.append(f"{where}: empty CUDA_Code")
            return None
        if not functional or not str(functional).strip():
            self.notes.append(f"{where}: no PyTorch_Code_Functional, so the kernel cannot be called as fn=")
            return None
        language = detect_language(code)
        if language == "cuda" and self.backend != "cuda":
            self.notes.append(f"{where}: CUDA kernel needs the cuda backend")
            return None
        task = self.task_files.task(level, number, task_name(row.get("Op_Name")), functional)
        if task is None:
            return None
        relative = "" if self.source.is_file() else f"/{path.relative_to(self.source)}"
        ref = f"{self.label}{relative}#{index}"
        self.task_by_ref[ref] = task
        return Candidate(
            task_id=task.id,
            source=str(code),
            language=language,
            kernel_name=str(row.get("Kernel_Name") or f"row{index}"),
            generator="import",
            source_ref=ref,
            claimed_correct=parse_bool(row.get("Correct")),
            claimed_speedup=parse_float(row.get("CUDA_Speedup_Native")),
        )
