"""Import our own archive: Parquet in the record schema (an export's `default` config).

Every record stores the kernel exactly as verified (`cuda_code`) and the task file it was verified against
(`reference_module_code`, which holds module_fn, Model, get_inputs and get_init_inputs). That file is
written back under the build directory as `levelL/N_name.py`, so the task id (`L/N`) and the kernel id
(sha256 of task id and source) come out the same as in the archive. Records keep what the archive said of
them: claims (`status == "correct"` -> claimed_correct, `speedup_eager` -> claimed_speedup) and, for
re-verification reports, the stored verdict in `recorded`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from builder.candidates import Candidate
from builder.errors import UsageError
from builder.generate.importers.common import parse_float, task_name
from builder.generate.importers.task_files import RowFileImport
from schemas import required_fields

# Provenance the re-verified record keeps from the archive's (generator becomes `import`).
CARRIED_PROVENANCE = ("model", "experiment", "parent_ids", "round", "strategy_declared", "designed_verdict")
# What the archive said of each kernel, kept for the re-verification report.
RECORDED_FIELDS = ("status", "flags", "speedup_eager", "runtime_ms", "eager_ms", "backend", "gpu_name", "timing_method")
READ_BATCH_ROWS = 256


def parquet_columns(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    try:
        return pq.read_schema(path).names
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise UsageError(f"{path}: unreadable Parquet ({exc})") from None


def is_records_file(path: Path) -> bool:
    """True for Parquet in our record schema (every required field present)."""
    return path.suffix == ".parquet" and set(required_fields()) <= set(parquet_columns(path))


def records_files(source: Path) -> list[Path]:
    files = [source] if source.is_file() else sorted(source.rglob("*.parquet"))
    if not files:
        raise UsageError(f"{source}: no .parquet files")
    for path in files:
        missing = [name for name in required_fields() if name not in parquet_columns(path)]
        if missing:
            raise UsageError(f"{path}: not in the record schema (missing {', '.join(missing)})")
    return files


def read_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row index, record dict) of one file, streamed; columns an older export lacks read as None."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    wanted = {
        "task_id", "kernel_id", "level", "task_number", "op_name", "kernel_name", "language", "cuda_code",
        "reference_module_code", *CARRIED_PROVENANCE, *RECORDED_FIELDS,
    }  # fmt: skip
    columns = [name for name in parquet.schema_arrow.names if name in wanted]
    index = 0
    for batch in parquet.iter_batches(batch_size=READ_BATCH_ROWS, columns=columns):
        for row in batch.to_pylist():
            yield index, {name: row.get(name) for name in wanted}
            index += 1


class RecordsImport(RowFileImport):
    """Turns stored records into candidates and task files; `notes` says why any record was left out."""

    def __init__(self, source: Path, label: str, out_dir: Path, backend: str, levels: list[int] | None = None):
        super().__init__(source, label, out_dir, backend, levels)
        # (task id, kernel id) -> the archive's own verdict and timing of that kernel
        self.recorded: dict[tuple[str, str], dict[str, Any]] = {}

    def files(self) -> list[Path]:
        return records_files(self.source)

    def rows(self, path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
        return read_records(path)

    def _row(self, path: Path, index: int, row: dict[str, Any]) -> Candidate | None:
        where = f"{path.name} row {index}"
        level, number = row["level"], row["task_number"]
        if self.levels and level not in self.levels:
            return None
        if row["task_id"] != f"{level}/{number}":
            self.notes.append(f"{where}: task id {row['task_id']} is not level/task_number ({level}/{number})")
            return None
        code, program = row["cuda_code"], row["reference_module_code"]
        if not code or not code.strip():
            self.notes.append(f"{where}: empty cuda_code")
            return None
        if not program or not program.strip():
            self.notes.append(f"{where}: no reference_module_code, so the task it was verified against is unknown")
            return None
        if row["language"] == "cuda" and self.backend != "cuda":
            self.notes.append(f"{where}: CUDA kernel needs the cuda backend")
            return None
        task = self.task_files.task(level, number, task_name(row["op_name"]), program)
        if task is None:
            return None
        relative = "" if self.source.is_file() else f"/{path.relative_to(self.source)}"
        ref = f"{self.label}{relative}#{index}"
        provenance = {name: row[name] for name in CARRIED_PROVENANCE if row[name] is not None}
        candidate = Candidate(
            task_id=task.id,
            source=code,
            language=row["language"],
            kernel_name=row["kernel_name"],
            generator="import",
            source_ref=ref,
            claimed_correct=row["status"] == "correct",
            claimed_speedup=parse_float(row["speedup_eager"]),
            **provenance,
        )
        if row["kernel_id"] != candidate.kernel_id:
            self.notes.append(f"{where}: stored kernel_id {row['kernel_id']} is not its source's hash (recomputed)")
        self.task_by_ref[ref] = task
        self.recorded[(candidate.task_id, candidate.kernel_id)] = {name: row[name] for name in RECORDED_FIELDS}
        return candidate
