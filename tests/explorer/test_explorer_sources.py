"""Resolving SOURCE: dataset folders, single files, the public 18-column schema, Hub ids, and bad input."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from builder.errors import UsageError
from explorer.filters import Filters
from explorer.query import Archive
from explorer.sources import KIND_ARCHIVE, KIND_SAKANA, resolve_source
from tests.explorer.archive_factory import make_record, sakana_row, write_archive, write_sakana


def test_dataset_folder_uses_level_splits_only(tmp_path):
    write_archive(tmp_path, [make_record("1/1", "a"), make_record("2/1", "b")])
    write_sakana(tmp_path / "sakana" / "level_1.parquet", [sakana_row(1, 1, "x", True, 1.0, 2.0)])  # another config
    source = resolve_source(str(tmp_path))
    assert source.kind == KIND_ARCHIVE and not source.synthetic
    assert sorted(f.name for f in source.files) == ["level_1-00000-of-00001.parquet", "level_2-00000-of-00001.parquet"]


def test_single_file_and_synthetic_label(synthetic_dir):
    one = next((synthetic_dir / "data").glob("level_1-*.parquet"))
    assert resolve_source(str(one)).files == (one,)
    source = resolve_source(str(synthetic_dir))
    assert source.synthetic and any("Synthetic" in note for note in source.notes)


def test_public_archive_schema_is_mapped(tmp_path):
    path = write_sakana(
        tmp_path / "public.parquet",
        [
            sakana_row(1, 3, "fast", True, 0.5, 2.0),
            sakana_row(1, 3, "wrong", False, None, 2.0),
            sakana_row(2, 7, "ok", True, 2.0, 1.0),
        ],
    )
    source = resolve_source(str(path))
    assert source.kind == KIND_SAKANA and any("not re-verified" in note for note in source.notes)
    archive = Archive(source)
    best = archive.best_per_task()
    assert list(best["kernel_name"]) == ["fast", "ok"] and list(best["task_id"]) == ["1/3", "2/7"]
    assert list(best["speedup_eager"]) == [pytest.approx(4.0), pytest.approx(0.5)]
    wrong = archive.kernels(Filters(status=("incorrect",)))
    assert list(wrong["kernel_name"]) == ["wrong"]
    record = archive.kernel(best["kernel_id"].iloc[0])
    assert record["cuda_code"] == "__global__ void fast() {}" and record["generator"] == "import"
    assert len(record["kernel_id"]) == 20


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p / "missing", "does not exist"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "no Parquet files"),
        (lambda p: [(p / "x.parquet").write_text("not parquet"), p / "x.parquet"][1], "cannot read Parquet"),
        (lambda p: pq.write_table(pa.table({"x": [1]}), p / "t.parquet") or p / "t.parquet", "missing required column"),
        (
            lambda p: (
                pq.write_table(pa.table({"Op_Name": ["a"], "CUDA_Code": ["b"]}), p / "s.parquet") or p / "s.parquet"
            ),
            "looks like the 18-column public archive but lacks",
        ),
    ],
)
def test_bad_sources_name_the_problem(tmp_path, make, message):
    with pytest.raises(UsageError, match=message):
        resolve_source(str(make(tmp_path)))


def test_wrong_schema_message_lists_missing_columns(tmp_path):
    pq.write_table(pa.table({"kernel_id": ["x"], "task_id": ["1/1"]}), tmp_path / "t.parquet")
    with pytest.raises(UsageError) as info:
        resolve_source(str(tmp_path / "t.parquet"))
    assert "cuda_code" in str(info.value) and "kernel_id," not in str(info.value)


def test_mixed_schemas_are_refused(tmp_path):
    write_archive(tmp_path / "a", [make_record("1/1", "a")])
    (tmp_path / "mixed").mkdir()
    (tmp_path / "a" / "data" / "level_1-00000-of-00001.parquet").rename(tmp_path / "mixed" / "ours.parquet")
    write_sakana(tmp_path / "mixed" / "public.parquet", [sakana_row(1, 1, "x", True, 1.0, 2.0)])
    with pytest.raises(UsageError, match="mixes"):
        resolve_source(str(tmp_path / "mixed"))


def test_hub_id_falls_back_to_the_cache(tmp_path, monkeypatch):
    import huggingface_hub

    cached = write_archive(tmp_path / "snapshot", [make_record("1/1", "a")])
    calls = []

    def fake_snapshot_download(repo_id, repo_type, allow_patterns, local_files_only=False):
        calls.append((repo_id, repo_type, local_files_only))
        if not local_files_only:
            raise OSError("offline")
        return str(cached)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    source = resolve_source("someone/kernels")
    assert source.label == "hf://datasets/someone/kernels" and len(source.files) == 1
    assert calls == [("someone/kernels", "dataset", False), ("someone/kernels", "dataset", True)]


def test_hub_id_not_cached_offline_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UsageError, match="could not be downloaded and is not in the local cache"):
        resolve_source("nobody-here/no-such-dataset-xyz")
