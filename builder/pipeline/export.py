"""Export a build dir to a Hugging Face dataset dir (Parquet + dataset card).

Layout of DATASET_DIR:

    README.md                          card with YAML `configs:` (default, sakana, sft, preference)
    export_info.json                   what was written (files per split, rows, schema hash): read by `embed`
    data/level_N-00000-of-0000K.parquet        default config, one split per level (full records)
    sakana/level_N-00000-of-0000K.parquet      the 18 columns of the best-known public archive
    sft/train-....parquet, preference/train-....parquet

Re-export never loses what `kernel-archive embed` added to the dataset dir: its columns
(config.DATASET_ENRICHMENT_FIELDS) are carried over by (task_id, kernel_id) where the build has none.
Everything is written to a staging folder first and swapped in at the end, so a failed export leaves the
previous dataset intact.

`merge` adds a build to a dataset rather than replacing it: the dataset's records whose key the build lacks
are kept as they are (each record names its own builder version, timing method and build time), and the
build's record wins where both hold a key. So an archive built in parts, on several boxes or over several
days, is one dataset, and a rebuilt part replaces just its own records.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import builder
from builder import config
from builder.errors import UsageError
from builder.pipeline.derived import load_instruction, preference_table, sakana_table, sft_table
from builder.pipeline.store import Store, utc_now
from schemas import SCHEMA_PATH, arrow_types
from schemas.arrow import kernel_record_schema

CONFIG_FOLDERS = {"default": "data", "sakana": "sakana", "sft": "sft", "preference": "preference"}


@dataclass
class ExportResult:
    out_dir: Path
    record_count: int
    # config -> split -> {"rows": n, "files": [relative paths]}
    configs: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    enrichment_carried: int = 0
    records_kept: int = 0  # with `merge`: the dataset's records the build did not replace


def read_build_records(store: Store, previous: Path | None) -> tuple[pa.Table, int]:
    """All records of the build as an Arrow table with the explicit schema, enrichment carried over."""
    names = list(arrow_types())
    select = ", ".join(f'r."{n}"' for n in names)
    carried_sql = "0"
    join = ""
    files = _previous_default_files(previous) if previous else []
    if files:
        old_columns = set(pq.read_schema(files[0]).names)
        fields = [f for f in config.DATASET_ENRICHMENT_FIELDS if f in old_columns]
        if fields:
            import pyarrow.dataset as ds

            previous_rows = ds.dataset([str(f) for f in files], format="parquet").to_table(
                columns=["task_id", "kernel_id", *fields]
            )
            store.con.register("previous_export", previous_rows)
            select = ", ".join(f'coalesce(r."{n}", o."{n}") AS "{n}"' if n in fields else f'r."{n}"' for n in names)
            join = " LEFT JOIN previous_export o USING (task_id, kernel_id)"
            filled = " OR ".join(f'(r."{f}" IS NULL AND o."{f}" IS NOT NULL)' for f in fields)
            carried_sql = f"count(*) FILTER (WHERE {filled})"
    query = f"SELECT {select} FROM records r{join} ORDER BY r.level, r.task_number, r.task_id, r.kernel_id"
    table = store.con.sql(query).to_arrow_table()
    carried = store.con.execute(f"SELECT {carried_sql} FROM records r{join}").fetchall()[0][0] if join else 0
    return table.cast(kernel_record_schema()), carried


def kept_previous_records(build_records: pa.Table, out_dir: Path) -> pa.Table | None:
    """The previous export's records whose (task_id, kernel_id) the build lacks, in the record schema."""
    files = _previous_default_files(out_dir)
    if not files:
        return None
    import pyarrow.dataset as ds

    previous = ds.dataset([str(f) for f in files], format="parquet", schema=kernel_record_schema()).to_table()

    def keys(table: pa.Table) -> list[tuple[str, str]]:
        return list(zip(table["task_id"].to_pylist(), table["kernel_id"].to_pylist(), strict=True))

    built = set(keys(build_records))
    return previous.filter(pa.array([key not in built for key in keys(previous)], pa.bool_()))


def _previous_default_files(out_dir: Path) -> list[Path]:
    return sorted((out_dir / CONFIG_FOLDERS["default"]).glob("*.parquet"))


def write_split(table: pa.Table, folder: Path, split: str) -> list[str]:
    """Write one split as shards of at most PARQUET_SHARD_MAX_ROWS rows; returns file names."""
    folder.mkdir(parents=True, exist_ok=True)
    shards = max(1, -(-table.num_rows // config.PARQUET_SHARD_MAX_ROWS))
    names = []
    for index in range(shards):
        name = f"{split}-{index:05d}-of-{shards:05d}.parquet"
        part = table.slice(index * config.PARQUET_SHARD_MAX_ROWS, config.PARQUET_SHARD_MAX_ROWS)
        pq.write_table(
            part,
            folder / name,
            row_group_size=config.PARQUET_ROW_GROUP_SIZE,
            compression=config.PARQUET_COMPRESSION,
        )
        names.append(name)
    return names


def split_by_level(table: pa.Table) -> dict[str, pa.Table]:
    import pyarrow.compute as pc

    levels = sorted(set(table.column("level").to_pylist()))
    return {f"level_{level}": table.filter(pc.equal(table.column("level"), level)) for level in levels}


def export_dataset(
    build_dir: Path, out_dir: Path, license_id: str = config.DEFAULT_LICENSE, merge: bool = False
) -> ExportResult:
    from builder.pipeline.card import CardFacts, collect_facts, render_card

    build_dir, out_dir = Path(build_dir), Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"{out_dir}: exists and is not a directory")
    if out_dir.resolve() == build_dir.resolve():
        raise UsageError("--out must differ from the build directory")
    with Store.open_existing(build_dir, read_only=True) as store:
        records, carried = read_build_records(store, out_dir if out_dir.is_dir() else None)
        builds = store.builds()
    if records.num_rows == 0:
        raise UsageError(f"{build_dir}: no records to export yet (run `kernel-archive build` first)")
    kept = kept_previous_records(records, out_dir) if merge and out_dir.is_dir() else None
    if kept is not None and kept.num_rows:
        order = [("level", "ascending"), ("task_number", "ascending"), ("task_id", "ascending")]
        records = pa.concat_tables([records, kept]).sort_by([*order, ("kernel_id", "ascending")])
    template = load_instruction()
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = out_dir / f".staging-{uuid.uuid4().hex[:8]}"
    result = ExportResult(
        out_dir=out_dir,
        record_count=records.num_rows,
        enrichment_carried=carried,
        records_kept=kept.num_rows if kept is not None else 0,
    )
    try:
        by_level = split_by_level(records)
        tables: dict[str, dict[str, pa.Table]] = {
            "default": by_level,
            "sakana": {split: sakana_table(t) for split, t in by_level.items()},
            "sft": {"train": sft_table(records, template)},
            "preference": {"train": preference_table(records, template)},
        }
        for config_name, splits in tables.items():
            folder = CONFIG_FOLDERS[config_name]
            written: dict[str, dict[str, Any]] = {}
            for split, table in splits.items():
                if table.num_rows == 0:
                    continue  # an empty config is left out of the card rather than published empty
                files = write_split(table, staging / folder, split)
                written[split] = {"rows": table.num_rows, "files": [f"{folder}/{name}" for name in files]}
            if written:
                result.configs[config_name] = written
        facts: CardFacts = collect_facts(records, builds, license_id, kept=result.records_kept)
        (staging / "README.md").write_text(render_card(facts, result.configs))
        (staging / config.EXPORT_INFO_NAME).write_text(
            json.dumps(_export_info(build_dir, result, license_id), indent=1)
        )
        _swap_in(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result


def _export_info(build_dir: Path, result: ExportResult, license_id: str) -> dict[str, Any]:
    return {
        "format_version": 1,
        "exported_at": utc_now(),
        "builder_version": builder.__version__,
        "build_dir": str(build_dir.resolve()),
        "record_count": result.record_count,
        "license": license_id,
        "record_schema_sha256": hashlib.sha256(SCHEMA_PATH.read_bytes()).hexdigest(),
        "row_group_size": config.PARQUET_ROW_GROUP_SIZE,
        "compression": config.PARQUET_COMPRESSION,
        "key": ["task_id", "kernel_id"],
        "enrichment_fields": list(config.DATASET_ENRICHMENT_FIELDS),
        "enrichment_carried": result.enrichment_carried,
        "records_kept": result.records_kept,
        "configs": result.configs,
    }


def rewrite_sakana_config(dataset_dir: Path) -> int:
    """Rewrite an export's `sakana` config from its `default` one (the same `sakana_table`), for exports
    whose build dir is not at hand; returns the rows written. Everything else in the folder is left alone."""
    dataset_dir = Path(dataset_dir)
    default_files = _previous_default_files(dataset_dir)
    if not default_files:
        raise UsageError(f"{dataset_dir}: no default config ({CONFIG_FOLDERS['default']}/*.parquet) to derive from")
    records = pq.read_table(default_files[0].parent, schema=kernel_record_schema())
    staging = dataset_dir / f".staging-{uuid.uuid4().hex[:8]}"
    folder = CONFIG_FOLDERS["sakana"]
    try:
        for split, table in split_by_level(records).items():
            write_split(sakana_table(table), staging / folder, split)
        target, retired = dataset_dir / folder, dataset_dir / f".retired-{folder}-{uuid.uuid4().hex[:8]}"
        if target.exists():
            os.replace(target, retired)
        os.replace(staging / folder, target)
        shutil.rmtree(retired, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return records.num_rows


def _swap_in(staging: Path, out_dir: Path) -> None:
    """Replace the config folders, card and export info with the staged ones; other files are left alone."""
    for folder in CONFIG_FOLDERS.values():
        target = out_dir / folder
        retired = out_dir / f".retired-{folder}-{uuid.uuid4().hex[:8]}"
        if target.exists():
            os.replace(target, retired)
        if (staging / folder).exists():
            os.replace(staging / folder, target)
        shutil.rmtree(retired, ignore_errors=True)
    for name in ("README.md", config.EXPORT_INFO_NAME):
        os.replace(staging / name, out_dir / name)
