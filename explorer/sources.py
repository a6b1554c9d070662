"""Resolve an explorer SOURCE to Parquet files and the SQL that presents them as kernel records.

SOURCE is one of: a dataset folder written by `kernel-archive export` (data/level_N-*.parquet), a single
Parquet file or a folder of them in our schema, a Hub dataset id (`owner/name`, fetched with
huggingface_hub and served from its cache when offline), or Parquet in the 18-column schema of the best-known
public archive, mapped on load with schemas.sakana_mapping(). Every failure is a UsageError naming what is wrong.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from builder import config
from builder.errors import UsageError
from schemas import arrow_types, required_fields, sakana_mapping

KIND_ARCHIVE = "archive"  # our kernel_record schema
KIND_SAKANA = "sakana"  # the public archive's 18 columns, mapped on load
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class ResolvedSource:
    spec: str  # what the user gave (or the default chosen for them)
    label: str  # shown in the app header
    kind: str  # KIND_ARCHIVE | KIND_SAKANA
    files: tuple[Path, ...]
    synthetic: bool = False
    notes: tuple[str, ...] = field(default=())  # caveats shown as a banner in the app

    def count_records(self) -> int:
        """Records in the files, from their Parquet footers (no data read); UsageError when there are none."""
        try:
            total = sum(pq.ParquetFile(f).metadata.num_rows for f in self.files)
        except (OSError, pa.ArrowException) as exc:
            raise UsageError(f"cannot read {self.label}: {str(exc).splitlines()[0]}") from None
        if total == 0:
            raise UsageError(f"{self.label} holds no kernel records")
        return total


def default_source() -> str:
    """data/sample/ when it exists, else the cached synthetic archive (labelled synthetic in the app)."""
    if any(config.SAMPLE_ARCHIVE_DIR.glob("data/*.parquet")):
        return str(config.SAMPLE_ARCHIVE_DIR)
    from explorer.sample import synthetic_archive_dir

    return str(synthetic_archive_dir())


def source_from_env() -> str:
    return os.environ.get(config.EXPLORER_SOURCE_ENV) or default_source()


def _parquet_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    split_files = sorted(path.glob("data/level_*.parquet"))
    if split_files:  # an exported dataset: the other configs (sakana/, sft/, ...) are not kernel records
        return split_files
    return sorted(p for p in path.rglob("*.parquet") if ".cache" not in p.parts)


def _schema_kind(path: Path) -> str:
    try:
        schema = pq.read_schema(path)
    except Exception as exc:  # noqa: BLE001 - any reader failure means the file is unusable
        raise UsageError(f"cannot read Parquet file {path}: {exc}") from None
    names = set(schema.names)
    missing_ours = [name for name in required_fields() if name not in names]
    if not missing_ours:
        return KIND_ARCHIVE
    sakana_cols = list(sakana_mapping())
    missing_sakana = [name for name in sakana_cols if name not in names]
    if not missing_sakana:
        return KIND_SAKANA
    # Name the schema the file is closest to, so the message says what is actually missing.
    present_ours = len(required_fields()) - len(missing_ours)
    if len(sakana_cols) - len(missing_sakana) > present_ours:
        raise UsageError(f"{path} looks like the 18-column public archive but lacks {', '.join(missing_sakana)}")
    raise UsageError(
        f"{path} is not a kernel archive: missing required column(s) {', '.join(missing_ours)}"
        " (expected schemas/kernel_record.json or the 18-column public-archive schema)"
    )


def _download_hub(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    patterns = list(config.EXPLORER_HUB_PATTERNS)
    try:
        return Path(snapshot_download(repo_id, repo_type="dataset", allow_patterns=patterns))
    except Exception as online_exc:  # noqa: BLE001 - offline, unknown repo, auth: try the cache next
        try:
            return Path(snapshot_download(repo_id, repo_type="dataset", allow_patterns=patterns, local_files_only=True))
        except Exception:  # noqa: BLE001
            reason = str(online_exc).splitlines()[0] if str(online_exc) else type(online_exc).__name__
            raise UsageError(
                f"Hub dataset {repo_id!r} could not be downloaded and is not in the local cache ({reason})"
            ) from None


def resolve_source(spec: str | os.PathLike | None = None) -> ResolvedSource:
    """Find the Parquet files of SOURCE and check their schema; raise UsageError naming any problem."""
    spec = str(spec) if spec not in (None, "") else source_from_env()
    path = Path(spec).expanduser()
    label = spec
    if path.exists():
        root = path
    elif _HUB_ID.match(spec) and not spec.startswith((".", "/")):
        root = _download_hub(spec)
        label = f"hf://datasets/{spec}"
    else:
        raise UsageError(
            f"source {spec!r} does not exist (expected a dataset folder, a Parquet file or a Hub dataset id)"
        )
    if root.is_dir() and not os.access(root, os.R_OK | os.X_OK):
        raise UsageError(f"source folder {root} is not readable")
    files = _parquet_files(root)
    if not files:
        raise UsageError(f"no Parquet files in {root} (an exported dataset has data/level_N-*.parquet)")
    kinds = {_schema_kind(f) for f in files}
    if len(kinds) > 1:
        raise UsageError(f"{root} mixes Parquet files of different schemas; point SOURCE at one of them")
    kind = kinds.pop()
    synthetic = (root / "README.md").is_file() and "synthetic kernel archive" in (root / "README.md").read_text(
        errors="replace"
    )[:200].lower()
    notes: list[str] = []
    if synthetic:
        notes.append("Synthetic archive: generated for tests and demos; no kernel here was compiled or measured.")
    if kind == KIND_SAKANA:
        notes.append(
            "Imported from the 18-column public-archive schema: correctness and timings are the source's own "
            "claims, not re-verified by this builder; flags, profiles and embeddings are absent."
        )
    return ResolvedSource(spec, label, kind, tuple(files), synthetic, tuple(notes))


def _sql_type(arrow_name: str) -> str:
    scalar = {
        "string": "VARCHAR",
        "json": "VARCHAR",
        "int32": "INTEGER",
        "int64": "BIGINT",
        "float32": "FLOAT",
        "float64": "DOUBLE",
        "bool": "BOOLEAN",
    }
    if arrow_name.startswith("list<"):
        return scalar[arrow_name[5:-1]] + "[]"
    return scalar[arrow_name]


def optional_columns() -> dict[str, str]:
    """Columns read when an archive has them (NULL otherwise) that the record schema does not (yet) define."""
    return {n: t for n, t in config.EXPLORER_OPTIONAL_COLUMNS.items() if n not in arrow_types()}


def _optional_column(name: str, sql_type: str, present: bool) -> str:
    return f'CAST("{name}" AS {sql_type}) AS "{name}"' if present else f'CAST(NULL AS {sql_type}) AS "{name}"'


def records_sql(source: ResolvedSource) -> str:
    """A SELECT yielding every kernel_record column (in schema order) from the source's files."""
    file_list = "[" + ", ".join("'" + str(f).replace("'", "''") + "'" for f in source.files) + "]"
    scan = f"read_parquet({file_list}, union_by_name = true)"
    types = arrow_types()
    if source.kind == KIND_ARCHIVE:
        present = set()
        for f in source.files:
            present |= set(pq.read_schema(f).names)
        # Older exports may lack newer optional columns: fill them with typed NULLs.
        cols = [f'"{n}"' if n in present else f'CAST(NULL AS {_sql_type(t)}) AS "{n}"' for n, t in types.items()]
        cols += [_optional_column(n, t, n in present) for n, t in optional_columns().items()]
        return f"SELECT {', '.join(cols)} FROM {scan}"
    mapped = {ours: col for col, (ours, _typ) in sakana_mapping().items()}
    exprs = {}
    for name, typ in types.items():
        if name == "status":
            exprs[name] = "CASE WHEN \"Correct\" THEN 'correct' ELSE 'incorrect' END"
        elif name in mapped:
            exprs[name] = f'CAST("{mapped[name]}" AS {_sql_type(typ)})'
        else:
            exprs[name] = f"CAST(NULL AS {_sql_type(typ)})"
    exprs["task_id"] = 'CAST("Level_ID" AS VARCHAR) || \'/\' || CAST("Task_ID" AS VARCHAR)'
    exprs["kernel_id"] = (
        'substr(sha256(CAST("Level_ID" AS VARCHAR) || \'/\' || CAST("Task_ID" AS VARCHAR) || chr(10) || '
        "coalesce(\"CUDA_Code\", '')), 1, 20)"
    )
    exprs.update(
        backend="'cuda'",
        language="'cuda'",
        generator="'import'",
        flags="CAST([] AS VARCHAR[])",
        ranking_eligible='coalesce("Correct", false)',
        suite="'sakana'",
    )
    exprs.update({n: f"CAST(NULL AS {t})" for n, t in optional_columns().items()})
    return "SELECT " + ", ".join(f'{expr} AS "{name}"' for name, expr in exprs.items()) + f" FROM {scan}"
