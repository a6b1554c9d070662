"""Small hand-made archives for explorer tests, written with the exporter's layout and Arrow schema.

`explorer.sample` makes large realistic archives; here each test states the few records it needs, so the
expected answers (best kernel, fast_p, geomean) can be worked out by hand.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from schemas import KernelRecord, record_to_dict
from schemas.arrow import kernel_record_schema, sakana_schema


def make_record(task_id: str = "1/1", name: str = "k", code: str | None = None, **fields: Any) -> dict[str, Any]:
    """A schema-valid record dict; `fields` override anything (status, runtime_ms, embedding, ...)."""
    level, number = (int(part) for part in task_id.split("/"))
    code = code if code is not None else f"// {name}\n__global__ void {name}_kernel() {{}}\n"
    status = fields.pop("status", "correct")
    flags = fields.pop("flags", [])
    base = KernelRecord(
        kernel_id=hashlib.sha256(f"{task_id}\n{code}".encode()).hexdigest()[:20],
        task_id=task_id,
        level=level,
        task_number=number,
        op_name=fields.pop("op_name", f"op{level}_{number}"),
        kernel_name=name,
        backend="cuda",
        language="cuda",
        generator="llm",
        cuda_code=code,
        status=status,
        flags=flags,
        ranking_eligible=fields.pop("ranking_eligible", status == "correct" and not flags),
    )
    data = record_to_dict(base)
    data.update(fields)
    if data.get("runtime_ms") and data.get("eager_ms") and data.get("speedup_eager") is None:
        data["speedup_eager"] = data["eager_ms"] / data["runtime_ms"]
    if data.get("runtime_ms") and data.get("compile_ms") and data.get("speedup_compile") is None:
        data["speedup_compile"] = data["compile_ms"] / data["runtime_ms"]
    return data


def write_archive(out_dir: Path, records: list[dict[str, Any]], drop_columns: tuple[str, ...] = ()) -> Path:
    """data/level_N-00000-of-00001.parquet per level plus a README.md card; returns out_dir."""
    schema = kernel_record_schema()
    data_dir = Path(out_dir) / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    for level in sorted({r["level"] for r in records}):
        rows = [r for r in records if r["level"] == level]
        columns = {}
        for field in schema:
            values = [r.get(field.name) for r in rows]
            if field.name == "embedding":
                values = [None if v is None else np.asarray(v, dtype=np.float32).tolist() for v in values]
            columns[field.name] = pa.array(values, type=field.type)
        table = pa.Table.from_pydict(columns, schema=schema)
        if drop_columns:
            table = table.drop_columns(list(drop_columns))
        pq.write_table(table, data_dir / f"level_{level}-00000-of-00001.parquet")
    (Path(out_dir) / "README.md").write_text("# Test archive\n")
    return Path(out_dir)


def write_sakana(path: Path, rows: list[dict[str, Any]]) -> Path:
    """A Parquet file in the 18-column schema of the best-known public archive."""
    schema = sakana_schema()
    table = pa.Table.from_pydict(
        {f.name: pa.array([r.get(f.name) for r in rows], type=f.type) for f in schema}, schema=schema
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def sakana_row(level: int, task: int, name: str, correct: bool, runtime: float | None, eager: float) -> dict[str, Any]:
    return {
        "Op_Name": f"op_{task}",
        "Level_ID": level,
        "Task_ID": task,
        "Kernel_Name": name,
        "CUDA_Runtime": runtime,
        "PyTorch_Native_Runtime": eager,
        "PyTorch_Compile_Runtime": eager * 0.8,
        "CUDA_Speedup_Native": eager / runtime if runtime else None,
        "CUDA_Speedup_Compile": eager * 0.8 / runtime if runtime else None,
        "CUDA_Code": f"__global__ void {name}() {{}}",
        "PyTorch_Code_Module": "class Model: ...",
        "PyTorch_Code_Functional": "def module_fn(x): ...",
        "Correct": correct,
        "Max_Diff": 0.0,
        "Error": None,
        "NCU_Profile": None,
        "Torch_Profile": None,
        "Clang_Tidy": None,
    }
