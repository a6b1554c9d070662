"""Export: Parquet layout and schemas, load_dataset round trip, derived configs, card, re-export safety."""

from __future__ import annotations

import json

import datasets
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from pipeline_helpers import run_cli

from builder import config
from builder.errors import UsageError
from builder.pipeline.export import export_dataset
from builder.pipeline.store import Store
from builder.pipeline.synthetic import synthetic_records
from schemas.arrow import kernel_record_schema, sakana_schema


def _strip(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type, f.nullable) for f in schema])


def test_load_dataset_round_trip_for_every_config(fake_build, fake_dataset, tmp_path):
    with Store.open_existing(fake_build) as store:
        per_level = dict(store.con.execute("SELECT level, count(*) FROM records GROUP BY level").fetchall())
        correct = store.con.execute("SELECT count(*) FROM records WHERE ranking_eligible").fetchall()[0][0]
    default = datasets.load_dataset(str(fake_dataset), cache_dir=str(tmp_path))
    assert {split: len(ds) for split, ds in default.items()} == {f"level_{lvl}": n for lvl, n in per_level.items()}
    sakana = datasets.load_dataset(str(fake_dataset), "sakana", cache_dir=str(tmp_path))
    assert set(sakana) == set(default)
    assert sakana["level_1"].column_names == sakana_schema().names
    sft = datasets.load_dataset(str(fake_dataset), "sft", cache_dir=str(tmp_path))["train"]
    assert len(sft) == correct
    preference = datasets.load_dataset(str(fake_dataset), "preference", cache_dir=str(tmp_path))["train"]
    assert len(preference) > 0 and set(preference.column_names) >= {"prompt", "chosen", "rejected"}


def test_parquet_files_carry_the_explicit_schemas_and_small_row_groups(fake_dataset):
    info = json.loads((fake_dataset / config.EXPORT_INFO_NAME).read_text())
    for split, entry in info["configs"]["default"].items():
        for name in entry["files"]:
            meta = pq.ParquetFile(fake_dataset / name)
            assert _strip(meta.schema_arrow) == _strip(kernel_record_schema())
            assert all(
                meta.metadata.row_group(i).num_rows <= config.PARQUET_ROW_GROUP_SIZE for i in range(meta.num_row_groups)
            )
            assert pc.all(
                pc.equal(pq.read_table(fake_dataset / name).column("level"), int(split.split("_")[1]))
            ).as_py()
    for entry in info["configs"]["sakana"].values():
        for name in entry["files"]:
            assert pq.read_schema(fake_dataset / name).equals(sakana_schema())


def test_sakana_correct_and_sft_prompts_follow_the_records(fake_dataset):
    sakana = pq.read_table(fake_dataset / "sakana").to_pylist()
    default = pq.read_table(fake_dataset / "data").to_pylist()
    by_code = {r["cuda_code"]: r for r in default}
    for row in sakana:
        assert row["Correct"] == (by_code[row["CUDA_Code"]]["status"] == "correct")
    sft = pq.read_table(fake_dataset / "sft").to_pylist()
    template_head = (config.PROMPTS_DIR / config.SFT_INSTRUCTION_TEMPLATE).read_text().split("{{")[0]
    for row in sft:
        source = next(r for r in default if r["kernel_id"] == row["kernel_id"])
        assert source["ranking_eligible"] and row["completion"] == source["cuda_code"]
        assert row["prompt"].startswith(template_head) and source["reference_module_code"] in row["prompt"]
    for row in pq.read_table(fake_dataset / "preference").to_pylist():
        chosen = next(r for r in default if r["kernel_id"] == row["chosen_kernel_id"])
        rejected = next(r for r in default if r["kernel_id"] == row["rejected_kernel_id"])
        assert chosen["task_id"] == rejected["task_id"] and chosen["status"] == "correct"
        if rejected["status"] == "correct":
            assert rejected["runtime_ms"] >= chosen["runtime_ms"] * config.PREFERENCE_MIN_SPEEDUP


def test_card_front_matter_and_facts(fake_build, fake_dataset):
    text = (fake_dataset / "README.md").read_text()
    _, front, body = text.split("---\n", 2)
    meta = yaml.safe_load(front)
    assert meta["license"] == config.DEFAULT_LICENSE
    assert [c["config_name"] for c in meta["configs"]] == ["default", "sakana", "sft", "preference"]
    with Store.open_existing(fake_build) as store:
        total = store.count()
    assert f"{total} GPU/CPU kernels" in body
    for needle in (
        "Verification policy",
        "uninitialized_output",
        "fake-cpu",
        'load_dataset(repo, "sakana")',
        "## License",
    ):
        assert needle in body
    assert "Imported claims" not in body  # no imported records in this build


def synthetic_build(tmp_path, rows: int, generator: str = "bundled"):
    """A store holding `rows` synthetic records (bulk-inserted): exercises row groups and claims."""
    with Store.open(tmp_path / "build") as store:
        store.insert_arrow(synthetic_records(rows, tasks=1, generator=generator))
    return tmp_path / "build"


def test_row_groups_split_and_imported_claims_are_reported(tmp_path):
    build = synthetic_build(tmp_path, 2 * config.PARQUET_ROW_GROUP_SIZE + 7, generator="import")
    result = export_dataset(build, tmp_path / "ds", license_id="mit")
    (name,) = result.configs["default"]["level_1"]["files"]
    meta = pq.ParquetFile(tmp_path / "ds" / name).metadata
    assert (
        meta.num_row_groups >= 2
        and max(meta.row_group(i).num_rows for i in range(meta.num_row_groups)) == config.PARQUET_ROW_GROUP_SIZE
    )
    card = (tmp_path / "ds" / "README.md").read_text()
    assert "license: mit" in card and "## Imported claims" in card and "claims held" in card


def test_reexport_keeps_embedding_columns_written_by_embed(fake_build, tmp_path):
    out = tmp_path / "ds"
    export_dataset(fake_build, out)
    info = json.loads((out / config.EXPORT_INFO_NAME).read_text())
    # What `kernel-archive embed` does: rewrite the default Parquet files with enrichment columns filled.
    for entry in info["configs"]["default"].values():
        for name in entry["files"]:
            table = pq.read_table(out / name)
            coords = pa.array([float(i) for i in range(table.num_rows)], pa.float64())
            table = table.set_column(table.schema.get_field_index("map_x"), "map_x", coords)
            table = table.set_column(
                table.schema.get_field_index("cluster_label"), "cluster_label", pa.array(["c"] * table.num_rows)
            )
            pq.write_table(table, out / name)
    before = {
        (r["task_id"], r["kernel_id"]): (r["map_x"], r["cluster_label"])
        for r in pq.read_table(out / "data").to_pylist()
    }
    result = export_dataset(fake_build, out)
    after = {
        (r["task_id"], r["kernel_id"]): (r["map_x"], r["cluster_label"])
        for r in pq.read_table(out / "data").to_pylist()
    }
    assert after == before and result.enrichment_carried == len(before)
    assert not [p for p in out.iterdir() if p.name.startswith((".staging", ".retired"))]


def test_export_errors(tmp_path, fake_build):
    (tmp_path / "empty").mkdir()
    Store.open(tmp_path / "empty").close()
    with pytest.raises(UsageError, match="no records"):
        export_dataset(tmp_path / "empty", tmp_path / "ds")
    done = run_cli("export", tmp_path / "absent", "--out", tmp_path / "ds")
    assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1
    with pytest.raises(UsageError, match="differ"):
        export_dataset(fake_build, fake_build)


def test_merge_keeps_the_records_a_partial_rebuild_lacks_and_replaces_the_rest(tmp_path):
    earlier = synthetic_build(tmp_path / "a", 6)
    export_dataset(earlier, tmp_path / "ds")
    first = pq.read_table(tmp_path / "ds" / "data")
    # A rebuild of two of the six kernels (new runtimes) and one kernel the dataset never had.
    rebuilt = first.slice(0, 2).set_column(
        first.schema.get_field_index("runtime_ms"), "runtime_ms", pa.array([123.0, 456.0], pa.float64())
    )
    extra = synthetic_records(1, tasks=1).set_column(
        first.schema.get_field_index("kernel_id"), "kernel_id", pa.array(["brand-new"])
    )
    with Store.open(tmp_path / "b") as store:
        store.insert_arrow(pa.concat_tables([rebuilt, extra.cast(rebuilt.schema)]))
    done = run_cli("export", tmp_path / "b", "--out", tmp_path / "ds", "--merge")
    assert done.returncode == 0 and "kept 4 record(s)" in done.stdout
    merged = {(r["task_id"], r["kernel_id"]): r for r in pq.read_table(tmp_path / "ds" / "data").to_pylist()}
    before = {(r["task_id"], r["kernel_id"]): r for r in first.to_pylist()}
    assert set(merged) == set(before) | {(extra["task_id"][0].as_py(), "brand-new")}
    rebuilt_keys = list(before)[:2]
    assert [merged[key]["runtime_ms"] for key in rebuilt_keys] == [123.0, 456.0]
    assert all(merged[key] == before[key] for key in list(before)[2:])
    info = json.loads((tmp_path / "ds" / config.EXPORT_INFO_NAME).read_text())
    assert info["record_count"] == 7 and info["records_kept"] == 4
    assert "7 GPU/CPU kernels" in (tmp_path / "ds" / "README.md").read_text()
    assert "plus 4 record(s) kept from earlier builds" in (tmp_path / "ds" / "README.md").read_text()
    # Without --merge the export is the build's records alone.
    export_dataset(tmp_path / "b", tmp_path / "ds")
    assert pq.read_table(tmp_path / "ds" / "data").num_rows == 3
