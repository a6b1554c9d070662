"""Read the exported Parquet of a DATASET_DIR and rewrite it in place, atomically.

Split files (config.DATASET_SPLIT_GLOB) must have the kernel-record Arrow schema. Other Parquet
files in the dataset (extra configs) are refreshed too when they carry `kernel_id` and any of the
embedding columns. Rewrites go to temporary files next to the originals, and only when every new file
is written do they replace the originals (os.replace), so a failure never loses data.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from builder import config
from builder.errors import ArchiveError, UsageError
from schemas.arrow import kernel_record_schema

EMBED_COLUMNS = config.DATASET_ENRICHMENT_FIELDS  # the schema's embedding group
_TEMP_SUFFIX = ".embed-tmp"


@dataclass
class DatasetFiles:
    splits: dict[Path, pa.Table]  # split file -> its table (kernel-record schema)
    extras: dict[Path, pa.Table]  # other Parquet files keyed by kernel_id that carry embedding columns


def _schema_problem(actual: pa.Schema, expected: pa.Schema) -> str | None:
    actual_fields = [(f.name, f.type) for f in actual]
    expected_fields = [(f.name, f.type) for f in expected]
    if actual_fields == expected_fields:
        return None
    missing = [name for name, _ in expected_fields if name not in actual.names]
    if missing:
        return f"missing column(s) {', '.join(missing[:5])}"
    for name, typ in expected_fields:
        if name in actual.names and actual.field(name).type != typ:
            return f"column {name} is {actual.field(name).type}, expected {typ}"
    return "columns differ from the kernel-record schema"


def read_dataset(dataset_dir: Path) -> DatasetFiles:
    dataset_dir = Path(dataset_dir)
    if not dataset_dir.is_dir():
        raise UsageError(f"dataset folder not found: {dataset_dir}")
    split_paths = sorted(dataset_dir.glob(config.DATASET_SPLIT_GLOB))
    if not split_paths:
        raise UsageError(f"no split files ({config.DATASET_SPLIT_GLOB}) in {dataset_dir}: run `kernel-archive export`")
    expected = kernel_record_schema()
    splits = {}
    for path in split_paths:
        table = _read(path)
        problem = _schema_problem(table.schema, expected)
        if problem:
            raise ArchiveError(f"{path}: not a kernel-record split file ({problem})")
        splits[path] = table
    extras = {}
    for path in sorted(dataset_dir.rglob("*.parquet")):
        if path in splits or path.name.endswith(_TEMP_SUFFIX):
            continue
        schema = pq.read_schema(path)
        if "kernel_id" in schema.names and any(col in schema.names for col in EMBED_COLUMNS):
            extras[path] = _read(path)
    return DatasetFiles(splits, extras)


def _read(path: Path) -> pa.Table:
    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise ArchiveError(f"cannot read {path}: {exc}") from exc


def write_tables_atomically(tables: dict[Path, pa.Table]) -> None:
    """Write every table to a temporary sibling, then swap them all in; on failure the originals stay."""
    written: list[tuple[Path, Path]] = []
    try:
        for path, table in tables.items():
            temp = path.with_name(path.name + _TEMP_SUFFIX)
            with pq.ParquetWriter(temp, table.schema) as writer:
                writer.write_table(table, row_group_size=config.PARQUET_ROW_GROUP_SIZE)
            with open(temp, "rb") as handle:
                os.fsync(handle.fileno())
            written.append((temp, path))
    except BaseException as exc:
        for temp, _ in written:
            temp.unlink(missing_ok=True)
        for path in tables:
            path.with_name(path.name + _TEMP_SUFFIX).unlink(missing_ok=True)
        if isinstance(exc, (OSError, pa.ArrowException)):
            raise ArchiveError(f"could not rewrite the dataset (nothing changed): {exc}") from exc
        raise
    for temp, path in written:
        os.replace(temp, path)


def with_columns(table: pa.Table, values: dict[str, list]) -> pa.Table:
    """The table with the given columns replaced, keeping the table's exact schema (types, metadata)."""
    schema = table.schema
    for name, column in values.items():
        if name not in schema.names:
            continue
        index = schema.get_field_index(name)
        table = table.set_column(index, schema.field(index), pa.array(column, type=schema.field(index).type))
    return table.replace_schema_metadata(schema.metadata)
