"""The one query layer of the explorer: DuckDB over the archive's Parquet files.

`Archive` holds one DuckDB connection (opened once per source; the app caches it with st.cache_resource). At
open time it materialises the light columns of every record into an in-memory table `kernels` (no code,
no profiles, no embeddings), so filters and sorts never touch the Parquet files; the heavy columns are read
from the `records` view only for the one kernel a page shows or for full-text search. Every call takes its own
cursor (DuckDB connections are not shared between Streamlit's session threads) and results are kept in an LRU
keyed by the query and its parameters. Pages never write SQL.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from builder import config
from builder.errors import UsageError
from explorer.filters import Filters
from explorer.query_base import BASELINES, LIGHT_COLUMNS, SORTABLE, TABLE_COLUMNS, materialise, reads_parquet  # noqa: F401
from explorer.query_map import MapMixin
from explorer.query_search import SearchMixin
from explorer.sources import ResolvedSource


@dataclass(frozen=True)
class Overview:
    totals: dict[str, Any]
    counts_by_level: pd.DataFrame  # level, status, kernels
    counts_by_model: pd.DataFrame  # model, status, kernels
    counts_by_category: pd.DataFrame  # op_category, status, kernels
    speedups: dict[str, np.ndarray]  # baseline -> speedups of the ranking-eligible kernels
    fast_p: dict[str, pd.DataFrame]  # baseline -> p, fast_p
    top: pd.DataFrame


class Archive(MapMixin, SearchMixin):
    def __init__(self, source: ResolvedSource, materialised: duckdb.DuckDBPyConnection | None = None):
        """Open `source`; `materialised` is its connection from `query_base.materialise` when already made."""
        self.source = source
        self._con = materialised if materialised is not None else materialise(source)
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple, Any] = OrderedDict()
        self._pending: dict[tuple, Future] = {}
        self._embeddings: tuple[np.ndarray, np.ndarray] | None = None
        self._code_loaded = False
        self._index_lock = threading.Lock()  # the search index builds for seconds at 100k: not under _lock
        self.size = self._con.execute("SELECT count(*) FROM kernels").fetchone()[0]
        if self.size == 0:
            raise UsageError(f"{source.label} holds no kernel records")

    # --- plumbing ----------------------------------------------------------------------------------
    def cursor(self) -> duckdb.DuckDBPyConnection:
        return self._con.cursor()

    def _cached(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """The result for `key`, computed once: a caller asking while another computes it waits for that result
        (the background warm-up and the first page ask for the same queries at the same moment)."""
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            pending = self._pending.get(key)
            computing = pending is None
            if computing:
                pending = self._pending[key] = Future()
        if not computing:
            return pending.result()
        try:
            value = compute()
        except BaseException as exc:
            with self._lock:
                del self._pending[key]
            pending.set_exception(exc)
            raise
        with self._lock:
            del self._pending[key]
            self._cache[key] = value
            while len(self._cache) > config.EXPLORER_QUERY_CACHE_ENTRIES:
                self._cache.popitem(last=False)
        pending.set_result(value)
        return value

    def df(self, sql: str, params: list | None = None) -> pd.DataFrame:
        return self._cached(("sql", sql, repr(params)), lambda: self.cursor().execute(sql, params or []).df())

    def scalar(self, sql: str, params: list | None = None) -> Any:
        return self._cached(
            ("scalar", sql, repr(params)), lambda: self.cursor().execute(sql, params or []).fetchone()[0]
        )

    # --- vocabularies for filter widgets ------------------------------------------------------------
    def options(self, column: str) -> list:
        if column not in SORTABLE:
            raise UsageError(f"unknown column {column!r}")
        if column in ("flags", "strategy_tags"):
            sql = f"SELECT DISTINCT unnest({column}) AS v FROM kernels ORDER BY v"
        elif column == "task_id":
            return list(self.task_names())
        else:
            sql = f"SELECT DISTINCT {column} AS v FROM kernels WHERE {column} IS NOT NULL ORDER BY v"
        return [v for v in self.df(sql)["v"].tolist() if v is not None]

    def task_names(self) -> dict[str, str | None]:
        """task_id -> op name, in numeric order (1/2 before 1/10)."""
        frame = self.df(
            "SELECT task_id, any_value(op_name) AS op_name FROM kernels GROUP BY task_id "
            "ORDER BY min(level), min(task_number), task_id"
        )
        return dict(zip(frame["task_id"], frame["op_name"], strict=True))

    def has_values(self, column: str) -> bool:
        """Whether any kernel records `column` (optional columns are NULL in archives without them)."""
        _check_sort(column)
        return bool(self.scalar(f"SELECT count({column}) > 0 FROM kernels"))

    def embedding_model(self) -> str | None:
        return self.scalar("SELECT mode(embedding_model) FROM kernels WHERE embedding_model IS NOT NULL")

    # --- overview --------------------------------------------------------------------------------
    def overview(self) -> Overview:
        """Everything the overview page shows, in one call: the page and the background warm-up that runs while
        the browser loads the app (explorer.preload) ask for exactly the same queries."""
        return Overview(
            totals=self.totals(),
            counts_by_level=self.counts_by("level", "status"),
            counts_by_model=self.counts_by("model", "status"),
            counts_by_category=self.counts_by("op_category", "status"),
            speedups={b: self.speedup_values(b) for b in BASELINES},
            fast_p={b: self.fast_p_curve(b) for b in BASELINES},
            top=self.top_kernels(config.EXPLORER_OVERVIEW_TOP_KERNELS),
        )

    def totals(self) -> dict[str, Any]:
        row = self._cached(
            ("totals",),
            lambda: (
                self.cursor()
                .execute(
                    "SELECT count(*), count(DISTINCT task_id), avg((status = 'correct')::INT), avg(ranking_eligible::INT), "
                    "count(DISTINCT model) FROM kernels"
                )
                .fetchone()
            ),
        )
        return dict(kernels=row[0], tasks=row[1], correct_rate=row[2], eligible_rate=row[3], models=row[4])

    def counts_by(self, *columns: str, filters: Filters = Filters()) -> pd.DataFrame:
        for column in columns:
            if column not in SORTABLE:
                raise UsageError(f"unknown column {column!r}")
        where, params = filters.where()
        cols = ", ".join(columns)
        return self.df(
            f"SELECT {cols}, count(*) AS kernels FROM kernels WHERE {where} GROUP BY {cols} ORDER BY {cols}", params
        )

    def speedup_values(self, baseline: str, filters: Filters = Filters()) -> np.ndarray:
        column = _baseline_column(baseline)
        where, params = filters.where()
        frame = self.df(
            f"SELECT {column} AS s FROM kernels WHERE ranking_eligible AND {column} > 0 AND {where}", params
        )
        return frame["s"].to_numpy()

    def fast_p_curve(self, baseline: str, filters: Filters = Filters()) -> pd.DataFrame:
        """Share of tasks (those with any kernel under the filters) whose best eligible kernel beats p x baseline."""
        column = _baseline_column(baseline)
        where, params = filters.where()
        best = self.df(
            f"SELECT task_id, max(CASE WHEN ranking_eligible THEN {column} END) AS best FROM kernels "
            f"WHERE {where} GROUP BY task_id",
            params,
        )["best"].to_numpy(dtype=float, na_value=np.nan)
        ps = np.linspace(0.0, config.EXPLORER_FAST_P_MAX, config.EXPLORER_FAST_P_POINTS)
        if best.size == 0:
            return pd.DataFrame({"p": ps, "fast_p": np.zeros_like(ps)})
        filled = np.nan_to_num(best, nan=-np.inf)
        share = (filled[None, :] > ps[:, None]).mean(axis=1)
        return pd.DataFrame({"p": ps, "fast_p": share})

    def top_kernels(self, n: int = 20, filters: Filters = Filters()) -> pd.DataFrame:
        return self.kernels(filters, sort="speedup_eager", descending=True, limit=n, eligible_only=True)

    # --- tables --------------------------------------------------------------------------------
    def kernels(
        self,
        filters: Filters = Filters(),
        sort: str = "speedup_eager",
        descending: bool = True,
        limit: int | None = config.EXPLORER_TABLE_ROWS,
        eligible_only: bool = False,
        columns: tuple[str, ...] = TABLE_COLUMNS,
    ) -> pd.DataFrame:
        _check_sort(sort)
        where, params = filters.where()
        if eligible_only:
            where += " AND ranking_eligible"
        order = f"{_order(sort, descending)}, kernel_id"
        limit_sql = f" LIMIT {int(limit)}" if limit else ""
        cols = ", ".join(columns)
        return self.df(f"SELECT {cols} FROM kernels WHERE {where} ORDER BY {order}{limit_sql}", params)

    def count(self, filters: Filters = Filters()) -> int:
        where, params = filters.where()
        return int(self.scalar(f"SELECT count(*) FROM kernels WHERE {where}", params))

    def best_per_task(
        self,
        filters: Filters = Filters(),
        sort: str = "speedup_eager",
        descending: bool = True,
        baseline: str = "eager",
    ) -> pd.DataFrame:
        """The fastest ranking-eligible kernel of each task (ties broken by kernel_id), one row per task."""
        _check_sort(sort)
        column = _baseline_column(baseline)
        where, params = filters.where()
        cols = ", ".join(TABLE_COLUMNS)
        sql = (
            f"SELECT {cols}, n_eligible FROM (SELECT *, count(*) OVER (PARTITION BY task_id) AS n_eligible, "
            f"row_number() OVER (PARTITION BY task_id ORDER BY {column} DESC NULLS LAST, kernel_id) AS rank "
            f"FROM kernels WHERE ranking_eligible AND {where}) WHERE rank = 1 "
            f"ORDER BY {_order(sort, descending)}, level, task_number"
        )
        return self.df(sql, params)

    def by_model(self, filters: Filters = Filters(), group: tuple[str, ...] = ("model", "experiment")) -> pd.DataFrame:
        """Per model/experiment: kernels, correct rate, eligible rate, fast_1 and geomean speedup.

        fast_1 = share of the tasks the group attempted where its best eligible kernel beats eager;
        geomean = geometric mean of the group's best eligible eager speedup per task (tasks without one left out).
        """
        for column in group:
            _check_sort(column)
        where, params = filters.where()
        keys = ", ".join(group)
        sql = (
            f"WITH per_task AS (SELECT {keys}, task_id, count(*) AS n, sum((status = 'correct')::INT) AS n_correct, "
            f"sum(ranking_eligible::INT) AS n_eligible, max(CASE WHEN ranking_eligible THEN speedup_eager END) AS best "
            f"FROM kernels WHERE {where} GROUP BY {keys}, task_id) "
            f"SELECT {keys}, sum(n) AS kernels, count(*) AS tasks, sum(n_correct) / sum(n) AS correct_rate, "
            f"sum(n_eligible) / sum(n) AS eligible_rate, avg((coalesce(best, 0) > 1)::INT) AS fast_1, "
            f"exp(avg(ln(best)) FILTER (WHERE best > 0)) AS geomean_speedup "
            f"FROM per_task GROUP BY {keys} ORDER BY fast_1 DESC, geomean_speedup DESC NULLS LAST"
        )
        return self.df(sql, params)

    # --- task and kernel pages --------------------------------------------------------------------
    @reads_parquet
    def task(self, task_id: str) -> dict[str, Any] | None:
        row = (
            self.cursor()
            .execute(
                "SELECT task_id, level, task_number, op_name, op_category, reference_module_code, "
                "reference_functional_code, count(*) OVER () AS kernels FROM records WHERE task_id = ? LIMIT 1",
                [task_id],
            )
            .df()
        )
        return None if row.empty else row.iloc[0].to_dict()

    def task_kernels(self, task_id: str) -> pd.DataFrame:
        return self.kernels(Filters(task=(task_id,)), sort="speedup_eager", limit=None)

    @reads_parquet
    def kernel(self, kernel_id: str) -> dict[str, Any] | None:
        def load() -> dict[str, Any] | None:
            frame = self.cursor().execute("SELECT * FROM records WHERE kernel_id = ? LIMIT 1", [kernel_id]).df()
            return None if frame.empty else {k: _plain(v) for k, v in frame.iloc[0].to_dict().items()}

        return self._cached(("kernel", kernel_id), load)

    def children(self, kernel_id: str) -> pd.DataFrame:
        return self.df(
            "SELECT kernel_id, kernel_name, round, status, speedup_eager FROM kernels "
            "WHERE list_contains(coalesce(parent_ids, []), ?) ORDER BY round, kernel_id",
            [kernel_id],
        )

    def light_rows(self, kernel_ids: list[str]) -> pd.DataFrame:
        """Table rows for the given kernels, in the given order (unknown ids dropped)."""
        if not kernel_ids:
            return self.kernels(Filters(), limit=1).iloc[0:0]
        frame = self.df(
            f"SELECT {', '.join(TABLE_COLUMNS)} FROM kernels WHERE kernel_id IN ({', '.join('?' * len(kernel_ids))})",
            list(kernel_ids),
        )
        order = {kid: i for i, kid in enumerate(kernel_ids)}
        return frame.sort_values("kernel_id", key=lambda s: s.map(order)).reset_index(drop=True)


def _baseline_column(baseline: str) -> str:
    if baseline not in BASELINES:
        raise UsageError(f"baseline must be one of {', '.join(BASELINES)}, got {baseline!r}")
    return BASELINES[baseline]


def _order(column: str, descending: bool) -> str:
    """ORDER BY terms for a sort column; task ids in numeric order (1/2 before 1/10)."""
    direction = "DESC" if descending else "ASC"
    if column == "task_id":
        return f"level {direction}, task_number {direction}"
    return f"{column} {direction} NULLS LAST"


def _check_sort(column: str) -> None:
    if column not in SORTABLE:
        raise UsageError(f"cannot sort or group by {column!r}")


def _plain(value: Any) -> Any:
    """numpy scalars/arrays from DuckDB's DataFrame -> plain Python values."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return value


def open_archive(spec: str | None = None) -> Archive:
    from explorer.sources import resolve_source

    return Archive(resolve_source(spec))
