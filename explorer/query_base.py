"""Column sets and the Parquet-error guard shared by the two halves of the query layer."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import duckdb

from builder.errors import ArchiveError, UsageError
from explorer.sources import ResolvedSource, optional_columns, records_sql
from schemas import field_names

HEAVY_COLUMNS = (
    "cuda_code",
    "reference_module_code",
    "reference_functional_code",
    "ncu_profile",
    "torch_profile",
    "clang_tidy",
    "embedding",
    "error",
    "seeds",
)
LIGHT_COLUMNS = tuple(name for name in field_names() if name not in HEAVY_COLUMNS) + tuple(optional_columns())
SORTABLE = frozenset(LIGHT_COLUMNS)
BASELINES = {"eager": "speedup_eager", "compile": "speedup_compile"}
TABLE_COLUMNS = (
    "kernel_id",
    "task_id",
    "op_name",
    "kernel_name",
    "model",
    "experiment",
    "status",
    "flags",
    "runtime_ms",
    "eager_ms",
    "compile_ms",
    "speedup_eager",
    "speedup_compile",
    "strategy_tags",
    "floor_ms",  # beside the speedups when the archive records them (hidden when empty)
    "speed_of_light",
)


def reads_parquet(method: Callable) -> Callable:
    """Methods that read the Parquet files (not the in-memory table): a file gone or damaged since the archive
    was opened becomes one ArchiveError naming the source, which the app shows as a message."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except duckdb.Error as exc:
            raise ArchiveError(f"cannot read {self.source.label}: {str(exc).splitlines()[0]}") from None

    return wrapper


def materialise(source: ResolvedSource) -> duckdb.DuckDBPyConnection:
    """A connection holding the `records` view over the source's Parquet files and the in-memory `kernels` table
    of their light columns. Needs DuckDB alone (no pandas): `kernel-archive explore` runs it while Streamlit
    imports, the scan on the other core (DuckDB releases the GIL while it scans)."""
    con = duckdb.connect(":memory:")
    try:
        con.execute(f"CREATE VIEW records AS {records_sql(source)}")
        cols = ", ".join(f'"{c}"' for c in LIGHT_COLUMNS)
        # One thread: DuckDB's parallel Parquet scan spends twice the CPU on this many narrow columns
        # (measured on 100k records: 1.1 s of CPU for 0.8 s wall vs 0.6 s for 0.6 s), CPU the server and
        # the browser loading the app share at start. Queries after it use every thread.
        con.execute("SET threads = 1")
        con.execute(f"CREATE TABLE kernels AS SELECT {cols} FROM records")
        con.execute("RESET threads")
    except duckdb.Error as exc:
        con.close()
        raise UsageError(f"cannot load {source.label}: {str(exc).splitlines()[0]}") from None
    return con
