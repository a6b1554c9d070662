"""Arrow schemas derived from `kernel_record.json` (never written by hand)."""

from __future__ import annotations

import pyarrow as pa

from schemas import arrow_types, load_schema, required_fields, sakana_mapping

_SCALARS = {
    "string": pa.string(),
    "json": pa.string(),  # structured JSON stored as text: stable across records of any shape
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
}


def arrow_type(name: str) -> pa.DataType:
    if name.startswith("list<") and name.endswith(">"):
        return pa.list_(arrow_type(name[5:-1]))
    return _SCALARS[name]


def kernel_record_schema() -> pa.Schema:
    required = set(required_fields())
    props = load_schema()["properties"]
    fields = [
        pa.field(
            name, arrow_type(typ), nullable=name not in required, metadata={"description": props[name]["description"]}
        )
        for name, typ in arrow_types().items()
    ]
    return pa.schema(fields, metadata={"schema": "kernel_record", "source": "schemas/kernel_record.json"})


def sakana_schema() -> pa.Schema:
    return pa.schema([pa.field(col, arrow_type(typ)) for col, (_src, typ) in sakana_mapping().items()])
