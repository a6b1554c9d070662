"""The one kernel-record schema shared by the builder and the explorer.

`kernel_record.json` (JSON Schema, draft 2020-12) is the single definition. Everything else is derived
from it here: the Python `KernelRecord` dataclass, the explicit Arrow schema used for Parquet, the
flag vocabulary and the mapping to the 18 columns of the best-known public archive ("sakana").
"""

from __future__ import annotations

import dataclasses
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

SCHEMA_PATH = Path(__file__).with_name("kernel_record.json")


@lru_cache(maxsize=1)
def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def field_names() -> list[str]:
    return list(load_schema()["properties"])


def fields_in_group(group: str) -> list[str]:
    """Fields of one `x-group` (identity, provenance, code, verdict, timing, profiles, environment, embedding)."""
    return [name for name, spec in load_schema()["properties"].items() if spec["x-group"] == group]


def arrow_types() -> dict[str, str]:
    """Field name -> the schema's `x-arrow` type name (string, int32, float64, json, list<string>, ...)."""
    return {name: spec["x-arrow"] for name, spec in load_schema()["properties"].items()}


def json_fields() -> list[str]:
    """Fields that hold structured JSON, stored as JSON text in Parquet."""
    return [name for name, typ in arrow_types().items() if typ == "json"]


def required_fields() -> list[str]:
    return list(load_schema()["required"])


def flag_vocabulary() -> dict[str, dict[str, Any]]:
    return dict(load_schema()["x-flags"])


def disqualifying_flags() -> frozenset[str]:
    return frozenset(name for name, spec in flag_vocabulary().items() if spec["disqualifying"])


STATUSES = ("correct", "incorrect", "compile_error", "runtime_error", "timeout", "crash")


def sakana_mapping() -> dict[str, tuple[str, str]]:
    """Sakana column -> (our field, Arrow type of the Sakana column)."""
    return {col: (src, typ) for col, (src, typ) in load_schema()["x-sakana"].items()}


def _default_for(spec: dict[str, Any]) -> Any:
    types = spec["type"] if isinstance(spec["type"], list) else [spec["type"]]
    if "null" in types:
        return None
    if "array" in types:
        return dataclasses.field(default_factory=list)
    return dataclasses.MISSING


def _make_record_class() -> type:
    props = load_schema()["properties"]
    required = set(required_fields())
    fields: list[tuple] = []
    # Required fields without defaults first (dataclass ordering), then the rest.
    for name in props:
        if name in required and _default_for(props[name]) is dataclasses.MISSING:
            fields.append((name, Any))
    for name, spec in props.items():
        if name in required and _default_for(spec) is dataclasses.MISSING:
            continue
        default = _default_for(spec)
        if isinstance(default, dataclasses.Field):
            fields.append((name, Any, default))
        else:
            fields.append((name, Any, dataclasses.field(default=default)))
    cls = dataclasses.make_dataclass("KernelRecord", fields)
    cls.__module__ = __name__  # so pickling and reprs name this module
    cls.__doc__ = load_schema()["description"]
    return cls


KernelRecord = _make_record_class()


def record_to_dict(record: Any) -> dict[str, Any]:
    return dataclasses.asdict(record) if dataclasses.is_dataclass(record) else dict(record)


def record_from_dict(data: dict[str, Any]) -> Any:
    """Build a KernelRecord from a dict, ignoring keys the schema does not know."""
    known = set(field_names())
    return KernelRecord(**{k: v for k, v in data.items() if k in known})


def validate(record: Any) -> list[str]:
    """Return a list of problems (empty when the record conforms to the JSON Schema)."""
    import jsonschema

    data = record_to_dict(record)
    validator = jsonschema.Draft202012Validator(load_schema())
    problems = [f"{'/'.join(map(str, e.path)) or '<record>'}: {e.message}" for e in validator.iter_errors(data)]
    for name in json_fields():
        value = data.get(name)
        if value is not None:
            try:
                json.loads(value)
            except (TypeError, ValueError):
                problems.append(f"{name}: not valid JSON text")
    flags = data.get("flags") or []
    unknown = sorted(set(flags) - set(flag_vocabulary()))
    if unknown:
        problems.append(f"flags: unknown flag(s) {unknown}")
    return problems
