"""Filter state shared by the leaderboard, search and map pages, and its round trip through URL query params."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

from builder.errors import UsageError

NO_FLAGS = "none"  # the flags filter value meaning "kernels without any flag"

# Multi-valued filters: URL key -> (column of the kernels table, how the column is matched)
LIST_FILTERS = {
    "level": ("level", "in"),
    "task": ("task_id", "in"),
    "category": ("op_category", "in"),
    "model": ("model", "in"),
    "experiment": ("experiment", "in"),
    "status": ("status", "in"),
    "flag": ("flags", "any"),
    "tag": ("strategy_tags", "any"),
}


@dataclass(frozen=True)
class Filters:
    level: tuple[str, ...] = ()
    task: tuple[str, ...] = ()
    category: tuple[str, ...] = ()
    model: tuple[str, ...] = ()
    experiment: tuple[str, ...] = ()
    status: tuple[str, ...] = ()
    flag: tuple[str, ...] = ()
    tag: tuple[str, ...] = ()
    min_speedup: float | None = None

    def where(self) -> tuple[str, list]:
        """SQL condition over the kernels table (always valid, `TRUE` when empty) and its parameters."""
        clauses: list[str] = []
        params: list = []
        for key, (column, how) in LIST_FILTERS.items():
            values = list(getattr(self, key))
            if not values:
                continue
            if key == "level":
                try:
                    values = [int(v) for v in values]
                except ValueError:
                    raise UsageError(f"level filter must be integers, got {values}") from None
            if how == "in":
                clauses.append(f"{column} IN ({', '.join('?' * len(values))})")
                params.extend(values)
            else:
                parts = []
                if key == "flag" and NO_FLAGS in values:
                    parts.append(f"len(coalesce({column}, [])) = 0")
                    values = [v for v in values if v != NO_FLAGS]
                if values:
                    parts.append(f"list_has_any(coalesce({column}, []), ?::VARCHAR[])")
                    params.append(values)
                clauses.append("(" + " OR ".join(parts) + ")")
        if self.min_speedup is not None:
            clauses.append("speedup_eager >= ?")
            params.append(float(self.min_speedup))
        return (" AND ".join(clauses) or "TRUE"), params

    def to_query_params(self) -> dict[str, list[str] | str]:
        out: dict[str, list[str] | str] = {}
        for key in LIST_FILTERS:
            values = getattr(self, key)
            if values:
                out[key] = list(values)
        if self.min_speedup is not None:
            out["min_speedup"] = f"{self.min_speedup:g}"
        return out

    @classmethod
    def from_query_params(cls, params: Mapping) -> Filters:
        """Read filters from st.query_params-like mappings (values str or list; comma lists accepted); the first
        value that is not understood is a UsageError."""
        filters, problems = cls.parse_query_params(params)
        if problems:
            raise UsageError(problems[0])
        return filters

    @classmethod
    def parse_query_params(cls, params: Mapping) -> tuple[Filters, list[str]]:
        """(the filters understood, one sentence per value that is not): a bad value costs only itself."""
        kwargs: dict = {}
        problems: list[str] = []
        for key in LIST_FILTERS:
            raw = _get_all(params, key)
            values = [v for item in raw for v in str(item).split(",") if v != ""]
            if key == "level":
                bad = [v for v in values if not _is_int(v)]
                problems += [f"level must be a whole number, got {v!r}" for v in bad]
                values = [v for v in values if v not in bad]
            if values:
                kwargs[key] = tuple(dict.fromkeys(values))
        raw_speedup = _get_all(params, "min_speedup")
        if raw_speedup and raw_speedup[-1] != "":
            value = _finite_float(raw_speedup[-1])
            if value is None or value < 0:
                problems.append(f"min_speedup must be a finite number of 0 or more, got {raw_speedup[-1]!r}")
            else:
                kwargs["min_speedup"] = value
        return cls(**kwargs), problems

    def is_empty(self) -> bool:
        return all(not getattr(self, f.name) for f in fields(self) if f.name != "min_speedup") and (
            self.min_speedup is None
        )


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _finite_float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _get_all(params: Mapping, key: str) -> list[str]:
    if hasattr(params, "get_all"):  # st.query_params keeps repeated keys behind get_all
        return list(params.get_all(key))
    value = params.get(key)
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]
