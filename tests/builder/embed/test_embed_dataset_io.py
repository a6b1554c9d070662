from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from embed_helpers import make_records, write_dataset

from builder.embed import dataset_io
from builder.embed.dataset_io import read_dataset, with_columns, write_tables_atomically
from builder.errors import ArchiveError, UsageError
from schemas.arrow import kernel_record_schema


def test_round_trip_keeps_the_exact_schema(tmp_path):
    paths = write_dataset(tmp_path, make_records(6))
    files = read_dataset(tmp_path)
    assert sorted(files.splits) == sorted(paths)
    original = {path: pq.read_schema(path) for path in paths}
    new = {}
    for path, table in files.splits.items():
        n = table.num_rows
        new[path] = with_columns(
            table, {"embedding": [[0.5, 0.25]] * n, "cluster_id": list(range(n)), "strategy_tags": [["naive"]] * n}
        )
    write_tables_atomically(new)
    for path in paths:
        written = pq.read_table(path)
        assert written.schema.equals(original[path], check_metadata=True)  # field descriptions included
        assert (
            written.schema.equals(kernel_record_schema()) and written.schema.metadata == kernel_record_schema().metadata
        )
        assert written.column("embedding").type == pa.list_(pa.float32())
        assert written.column("strategy_tags").to_pylist()[0] == ["naive"]
    assert not list(tmp_path.rglob("*.embed-tmp"))


def test_failed_write_leaves_originals_untouched(tmp_path, monkeypatch):
    paths = write_dataset(tmp_path, make_records(12))
    assert len(paths) >= 2
    before = {p: p.read_bytes() for p in paths}
    files = read_dataset(tmp_path)
    tables = {p: with_columns(t, {"cluster_label": ["x"] * t.num_rows}) for p, t in files.splits.items()}
    real_writer, calls = pq.ParquetWriter, []

    def failing_writer(path, schema, **kwargs):
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full")
        return real_writer(path, schema, **kwargs)

    monkeypatch.setattr(dataset_io.pq, "ParquetWriter", failing_writer)
    with pytest.raises(ArchiveError, match="nothing changed.*disk full"):
        write_tables_atomically(tables)
    assert {p: p.read_bytes() for p in paths} == before
    assert not list(tmp_path.rglob("*.embed-tmp"))


def test_missing_dataset_and_foreign_files_are_one_line_errors(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        read_dataset(tmp_path / "nope")
    with pytest.raises(UsageError, match="no split files"):
        read_dataset(tmp_path)
    (tmp_path / "data").mkdir()
    pq.write_table(pa.table({"kernel_id": ["a"]}), tmp_path / "data" / "level_1-00000-of-00001.parquet")
    with pytest.raises(ArchiveError, match="not a kernel-record split file"):
        read_dataset(tmp_path)


def test_extra_configs_with_embedding_columns_are_found(tmp_path):
    write_dataset(tmp_path, make_records(3))
    extra = tmp_path / "preference" / "train.parquet"
    extra.parent.mkdir()
    pq.write_table(pa.table({"kernel_id": ["a"], "cluster_id": pa.array([1], pa.int32())}), extra)
    unrelated = tmp_path / "sakana" / "train.parquet"
    unrelated.parent.mkdir()
    pq.write_table(pa.table({"Op_Name": ["x"]}), unrelated)
    assert list(read_dataset(tmp_path).extras) == [extra]
