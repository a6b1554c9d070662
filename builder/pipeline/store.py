"""The build store: one DuckDB file per build dir, written only by the orchestrator.

Tables
- `records`: one row per verified kernel, columns derived from `schemas/kernel_record.json` (never listed
  here), primary key (task_id, kernel_id). Each record is inserted in its own transaction as soon as it
  is finished, so `kill -9` loses at most the kernels still in flight.
- `builds`: one row per run of `kernel-archive build` (parameters, seed policy and seeds, start/finish,
  counts).
- `baselines`: eager / torch.compile reference times per (task, backend, device), cached across runs.
- `waiting`: (task_id, kernel_id) pairs whose last try the builder's own machinery failed (its sandbox,
  compiler, disk or device: builder/verify/engine/infrastructure.py), with why and how often; no record was stored for
  them, and a rerun tries them again. A pair leaves the table when its record is stored.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb

from builder import config
from builder.errors import UsageError
from builder.redaction import known_secrets, redact_fields
from schemas import arrow_types, record_from_dict, record_to_dict

_DUCK_SCALARS = {
    "string": "VARCHAR",
    "json": "VARCHAR",
    "int32": "INTEGER",
    "int64": "BIGINT",
    "float32": "FLOAT",
    "float64": "DOUBLE",
    "bool": "BOOLEAN",
}


def duckdb_type(arrow_name: str) -> str:
    """DuckDB SQL type of a schema `x-arrow` type name (list<T> -> T[])."""
    if arrow_name.startswith("list<") and arrow_name.endswith(">"):
        return duckdb_type(arrow_name[5:-1]) + "[]"
    return _DUCK_SCALARS[arrow_name]


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def db_path(build_dir: Path) -> Path:
    return Path(build_dir) / config.BUILD_DB_NAME


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass
class BuildRun:
    build_id: int
    seeds: list[int]


class Store:
    """Read/write access to a build's DuckDB file (open with `Store.open` / `Store.open_existing`)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path, read_only: bool):
        self.con = con
        self.path = path
        self.read_only = read_only
        self.columns = list(arrow_types())
        # What a stored record's texts are redacted of (builder/redaction.py): only a writer needs them.
        self.secrets: list[str] = [] if read_only else known_secrets()

    def add_secrets(self, values: Iterable[str | None]) -> None:
        """Redact these too from every record stored from now on (the generator's API keys)."""
        self.secrets = known_secrets(extra=[*self.secrets, *values])

    # -- opening ---------------------------------------------------------------------------------
    @classmethod
    def open(cls, build_dir: Path) -> Store:
        """Open (creating if needed) the store of `build_dir` for writing."""
        build_dir = Path(build_dir)
        if build_dir.exists() and not build_dir.is_dir():
            raise UsageError(f"{build_dir}: not a directory")
        build_dir.mkdir(parents=True, exist_ok=True)
        path = db_path(build_dir)
        con = _connect(path, read_only=False)
        store = cls(con, path, read_only=False)
        store._create_schema()
        return store

    @classmethod
    def open_existing(cls, build_dir: Path, read_only: bool = True) -> Store:
        """Open the store of an existing build dir; a missing or malformed one is a one-line UsageError."""
        build_dir = Path(build_dir)
        if not build_dir.is_dir():
            raise UsageError(f"{build_dir}: no such build directory")
        path = db_path(build_dir)
        if not path.is_file():
            raise UsageError(
                f"{build_dir}: not a build directory (no {config.BUILD_DB_NAME}; run `kernel-archive build`)"
            )
        con = _connect(path, read_only=read_only)
        tables = {row[0] for row in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        missing = {"records", "builds", "baselines"} - tables
        if missing:
            con.close()
            raise UsageError(f"{path}: malformed build database (missing table(s) {', '.join(sorted(missing))})")
        store = cls(con, path, read_only=read_only)
        if not read_only:
            store._add_missing_columns()
        return store

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _create_schema(self) -> None:
        cols = ", ".join(f"{_quoted(name)} {duckdb_type(typ)}" for name, typ in arrow_types().items())
        self.con.execute(f"CREATE TABLE IF NOT EXISTS records ({cols}, PRIMARY KEY (task_id, kernel_id))")
        self.con.execute(
            """CREATE TABLE IF NOT EXISTS builds (
                build_id INTEGER PRIMARY KEY, parameters VARCHAR, seed_policy VARCHAR, seeds VARCHAR,
                started_at VARCHAR, finished_at VARCHAR, state VARCHAR, counts VARCHAR, host VARCHAR)"""
        )
        self.con.execute(
            """CREATE TABLE IF NOT EXISTS baselines (
                task_id VARCHAR, backend VARCHAR, device VARCHAR, eager_ms DOUBLE, compile_ms DOUBLE,
                recorded_at VARCHAR, PRIMARY KEY (task_id, backend, device))"""
        )
        self.con.execute(
            """CREATE TABLE IF NOT EXISTS waiting (
                task_id VARCHAR, kernel_id VARCHAR, reason VARCHAR, failures INTEGER, last_at VARCHAR,
                PRIMARY KEY (task_id, kernel_id))"""
        )
        self._add_missing_columns()

    def _add_missing_columns(self) -> None:
        # A schema that gained fields since the build started: add them (null) rather than refuse the dir.
        have = {
            r[0]
            for r in self.con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name='records'"
            ).fetchall()
        }
        for name, typ in arrow_types().items():
            if name not in have:
                self.con.execute(f"ALTER TABLE records ADD COLUMN {_quoted(name)} {duckdb_type(typ)}")

    # -- records ---------------------------------------------------------------------------------
    def done_keys(self) -> set[tuple[str, str]]:
        return {(t, k) for t, k in self.con.execute("SELECT task_id, kernel_id FROM records").fetchall()}

    def add_record(self, record: Any) -> bool:
        """Insert one finished record in its own transaction; False when (task_id, kernel_id) was stored already."""
        data = redact_fields(record_to_dict(record), self.secrets)
        values = [_clean(data.get(name)) for name in self.columns]
        placeholders = ", ".join("?" for _ in self.columns)
        names = ", ".join(_quoted(n) for n in self.columns)
        self.con.execute("BEGIN TRANSACTION")
        try:
            before = self.con.execute(
                "SELECT count(*) FROM records WHERE task_id = ? AND kernel_id = ?", [data["task_id"], data["kernel_id"]]
            ).fetchall()[0][0]
            if before == 0:
                self.con.execute(f"INSERT INTO records ({names}) VALUES ({placeholders})", values)
                if self._has_table("waiting"):
                    self.con.execute("DELETE FROM waiting WHERE task_id = ? AND kernel_id = ?",
                                     [data["task_id"], data["kernel_id"]])  # fmt: skip
                if data.get("eager_ms") is not None or data.get("compile_ms") is not None:
                    self._cache_baseline(data)
            self.con.execute("COMMIT")
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        return before == 0

    # -- pairs the machinery failed --------------------------------------------------------------
    def note_waiting(self, task_id: str, kernel_id: str, reason: str) -> None:
        """A pair whose try the builder's machinery failed: no record, and a retry to come."""
        redacted = redact_fields({"error": reason}, self.secrets)["error"]
        self.con.execute(
            "INSERT INTO waiting VALUES (?, ?, ?, 1, ?) ON CONFLICT (task_id, kernel_id) DO UPDATE SET "
            "reason = excluded.reason, failures = waiting.failures + 1, last_at = excluded.last_at",
            [task_id, kernel_id, redacted, utc_now()],
        )

    def waiting(self) -> list[dict[str, Any]]:
        """The pairs waiting after a failure of the machinery, latest first (none in a store made before the table)."""
        if not self._has_table("waiting"):
            return []
        rel = self.con.execute("SELECT * FROM waiting ORDER BY last_at DESC, task_id, kernel_id")
        names = [d[0] for d in rel.description]
        return [dict(zip(names, row, strict=True)) for row in rel.fetchall()]

    def _has_table(self, name: str) -> bool:
        query = "SELECT count(*) FROM information_schema.tables WHERE table_name = ?"
        return bool(self.con.execute(query, [name]).fetchall()[0][0])

    def insert_arrow(self, table: Any) -> int:
        """Bulk-insert an Arrow table of records (imports, benchmarks) in one transaction; existing keys are kept.

        Returns the number of rows inserted."""
        names = ", ".join(_quoted(n) for n in self.columns)
        self.con.register("incoming_records", table)
        try:
            before = self.count()
            self.con.execute(f"INSERT OR IGNORE INTO records ({names}) SELECT {names} FROM incoming_records")
            return self.count() - before
        finally:
            self.con.unregister("incoming_records")

    def records_for(self, keys: Iterable[tuple[str, str]]) -> list[Any]:
        """Stored records (as KernelRecord) for the given (task_id, kernel_id) pairs, in no particular order."""
        keys = list(keys)
        if not keys:
            return []
        rel = self.con.execute(
            "SELECT r.* FROM records r JOIN (SELECT unnest(?) AS task_id, unnest(?) AS kernel_id) k "
            "USING (task_id, kernel_id)",
            [[k[0] for k in keys], [k[1] for k in keys]],
        )
        names = [d[0] for d in rel.description]
        return [record_from_dict(dict(zip(names, row, strict=True))) for row in rel.fetchall()]

    def update_fields(self, task_id: str, kernel_id: str, fields: dict[str, Any]) -> bool:
        """Overwrite some columns of one stored record in its own transaction (post-build passes such as
        `kernel-archive tidy`); identity columns are refused. False when no such record exists."""
        unknown = set(fields) - set(self.columns)
        if unknown:
            raise ValueError(f"not record fields: {sorted(unknown)}")
        if {"task_id", "kernel_id"} & set(fields):
            raise ValueError("a record's identity (task_id, kernel_id) cannot be updated")
        fields = redact_fields(fields, self.secrets)
        assignments = ", ".join(f"{_quoted(name)} = ?" for name in fields)
        values = [_clean(value) for value in fields.values()]
        rows = self.con.execute(
            f"UPDATE records SET {assignments} WHERE task_id = ? AND kernel_id = ? RETURNING 1",
            [*values, task_id, kernel_id],
        ).fetchall()
        return bool(rows)

    def count(self) -> int:
        return self.con.execute("SELECT count(*) FROM records").fetchall()[0][0]

    # -- baselines -------------------------------------------------------------------------------
    def _cache_baseline(self, data: dict[str, Any]) -> None:
        self.con.execute(
            "INSERT OR IGNORE INTO baselines VALUES (?, ?, ?, ?, ?, ?)",
            [
                data["task_id"],
                data["backend"],
                data.get("gpu_name") or "",
                data.get("eager_ms"),
                data.get("compile_ms"),
                utc_now(),
            ],
        )

    def baselines(self) -> dict[tuple[str, str, str], tuple[float | None, float | None]]:
        rows = self.con.execute("SELECT task_id, backend, device, eager_ms, compile_ms FROM baselines").fetchall()
        return {(t, b, d): (e, c) for t, b, d, e, c in rows}

    # -- builds ----------------------------------------------------------------------------------
    def start_build(self, parameters: dict[str, Any], seeds: list[int], host: dict[str, Any]) -> BuildRun:
        build_id = self.con.execute("SELECT coalesce(max(build_id), 0) + 1 FROM builds").fetchall()[0][0]
        self.con.execute(
            "INSERT INTO builds VALUES (?, ?, ?, ?, ?, NULL, 'running', NULL, ?)",
            [
                build_id,
                json.dumps(parameters, sort_keys=True),
                config.SEED_POLICY,
                json.dumps(seeds),
                utc_now(),
                json.dumps(host),
            ],
        )
        return BuildRun(build_id=build_id, seeds=seeds)

    def finish_build(self, build_id: int, state: str, counts: dict[str, Any]) -> None:
        self.con.execute(
            "UPDATE builds SET finished_at = ?, state = ?, counts = ? WHERE build_id = ?",
            [utc_now(), state, json.dumps(counts, sort_keys=True), build_id],
        )

    def builds(self) -> list[dict[str, Any]]:
        rel = self.con.execute("SELECT * FROM builds ORDER BY build_id")
        names = [d[0] for d in rel.description]
        rows = [dict(zip(names, row, strict=True)) for row in rel.fetchall()]
        for row in rows:
            for key in ("parameters", "seeds", "counts", "host"):
                row[key] = json.loads(row[key]) if row.get(key) else None
        return rows


def _clean(value: Any) -> Any:
    # NaN/inf are not JSON and mean "no measurement" in a record: store them as NULL.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _connect(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    try:
        return duckdb.connect(str(path), read_only=read_only)
    except duckdb.IOException as exc:
        text = str(exc)
        if "lock" in text.lower():
            raise UsageError(f"{path}: in use by a running build (pid lock held); try again when it finishes") from None
        raise UsageError(f"{path}: not a readable build database ({text.splitlines()[0]})") from None
    except duckdb.Error as exc:
        raise UsageError(f"{path}: not a readable build database ({str(exc).splitlines()[0]})") from None


def write_progress_snapshot(build_dir: Path, snapshot: dict[str, Any]) -> None:
    """Atomically replace BUILD_DIR/progress.json (read by `status` while the database is locked)."""
    target = Path(build_dir) / config.BUILD_PROGRESS_NAME
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(snapshot, sort_keys=True))
    os.replace(tmp, target)
