"""Small kernel-record datasets written with the exporter's Arrow schema (until the exporter exists)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from builder.candidates import kernel_id
from builder.embed.synthetic import synthetic_kernels
from schemas import KernelRecord, record_to_dict
from schemas.arrow import kernel_record_schema


def make_records(count: int, seed: int = 0) -> list[dict]:
    records = []
    for kernel in synthetic_kernels(count, seed=seed, tasks=6):
        level, number = (int(part) for part in kernel.task_id.split("/"))
        record = KernelRecord(
            kernel_id=kernel_id(kernel.task_id, kernel.source),
            task_id=kernel.task_id,
            level=level,
            task_number=number,
            op_name=f"op_{number}",
            kernel_name=kernel.name,
            backend="cuda",
            language="cuda",
            generator="synthetic",
            cuda_code=kernel.source,
            status="correct",
            flags=[],
            ranking_eligible=True,
        )
        records.append(record_to_dict(record))
    return records


def write_split(dataset_dir: Path, level: int, records: list[dict], shard: str = "00000-of-00001") -> Path:
    path = dataset_dir / "data" / f"level_{level}-{shard}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records, schema=kernel_record_schema()), path)
    return path


def write_dataset(dataset_dir: Path, records: list[dict]) -> list[Path]:
    """One split file per level, like the exporter."""
    by_level: dict[int, list[dict]] = {}
    for record in records:
        by_level.setdefault(record["level"], []).append(record)
    return [write_split(dataset_dir, level, rows) for level, rows in sorted(by_level.items())]


def read_rows(dataset_dir: Path) -> list[dict]:
    rows = []
    for path in sorted((dataset_dir / "data").glob("level_*.parquet")):
        rows.extend(pq.read_table(path).to_pylist())
    return rows


class CountingModel:
    """Wraps a SentenceTransformer and counts what it is asked to encode."""

    def __init__(self, model):
        self._model = model
        self.encode_calls = 0
        self.texts_encoded = 0

    def encode(self, texts, **kwargs):
        self.encode_calls += 1
        self.texts_encoded += len(texts)
        return self._model.encode(texts, **kwargs)

    def __getattr__(self, name):
        return getattr(self._model, name)


def run_cli(args, monkeypatch, capsys) -> tuple[int, str, str]:
    """Run `kernel-archive ARGS` through builder.cli.main (the real error handling): (exit code, stdout, stderr)."""
    import pytest

    from builder.cli import main

    monkeypatch.setattr("sys.argv", ["kernel-archive", *args])
    with pytest.raises(SystemExit) as info:
        main()
    captured = capsys.readouterr()
    return int(info.value.code or 0), captured.out, captured.err
