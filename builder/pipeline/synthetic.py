"""Synthetic but realistic records (sizes, status mix, JSON profiles) for export benchmarks and tests.

Never part of a build: these rows are made up and say so (`generator`/`source_ref` mark them synthetic
unless a test asks for another generator).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from schemas.arrow import kernel_record_schema

STATUS_MIX = {
    "correct": 0.45,
    "incorrect": 0.2,
    "compile_error": 0.2,
    "runtime_error": 0.08,
    "timeout": 0.04,
    "crash": 0.03,
}
KERNEL_BODY = """#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void kernel_{k}(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out, int n) {{
    __shared__ float tile[{tile}][{tile}];
    int row = blockIdx.y * {tile} + threadIdx.y;
    int col = blockIdx.x * {tile} + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (n + {tile} - 1) / {tile}; ++t) {{
        tile[threadIdx.y][threadIdx.x] = a[row * n + t * {tile} + threadIdx.x] * {scale}f;
        __syncthreads();
        for (int i = 0; i < {tile}; ++i) acc += tile[threadIdx.y][i] * b[(t * {tile} + i) * n + col];
        __syncthreads();
    }}
    if (row < n && col < n) out[row * n + col] = acc;
}}

torch::Tensor forward(torch::Tensor a, torch::Tensor b) {{
    auto out = torch::empty_like(a);
    int n = a.size(0);
    dim3 block({tile}, {tile});
    dim3 grid((n + {tile} - 1) / {tile}, (n + {tile} - 1) / {tile});
    kernel_{k}<<<grid, block>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ m.def("forward", &forward, "kernel {k}"); }}
"""
REFERENCE = """import torch
import torch.nn as nn

OP_CATEGORY = "matmul"


def module_fn(a, b):
    return torch.matmul(a, b) * {scale}


class Model(nn.Module):
    def forward(self, a, b, fn=module_fn):
        return fn(a, b)


N = {n}


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
"""


def synthetic_records(rows: int, tasks: int = 250, seed: int = 0, generator: str = "synthetic") -> pa.Table:
    """`rows` records over `tasks` tasks in levels 1..3, as an Arrow table with the record schema."""
    rng = np.random.default_rng(seed)
    task_index = rng.integers(0, tasks, rows)
    levels = (task_index % 3 + 1).astype(np.int32)
    numbers = (task_index // 3 + 1).astype(np.int32)
    names, probs = zip(*STATUS_MIX.items(), strict=True)
    statuses = rng.choice(np.array(names), rows, p=np.array(probs))
    correct = statuses == "correct"
    runtime = np.where(correct, rng.lognormal(0.0, 0.8, rows), np.nan)
    eager = rng.lognormal(0.2, 0.5, rows)
    compiled = eager * rng.uniform(0.6, 1.0, rows)
    references = [REFERENCE.format(scale=i % 7 + 1, n=256 + 64 * (i % 5)) for i in range(tasks)]
    profile = json.dumps(
        {"top": [{"name": f"kernel_{i}", "device_ms": 0.1 * i, "calls": 1} for i in range(12)], "own_fraction": 0.9}
    )
    tidy = json.dumps(
        {
            "diagnostics": [
                {
                    "line": 3,
                    "column": 5,
                    "check": "performance-unnecessary-value-param",
                    "severity": "warning",
                    "message": "the parameter is copied",
                }
            ],
            "counts": {"warning": 1},
        }
    )
    columns = {
        "kernel_id": [f"{i:020x}" for i in range(rows)],
        "task_id": [f"{lv}/{nb}" for lv, nb in zip(levels.tolist(), numbers.tolist(), strict=True)],
        "level": levels,
        "task_number": numbers,
        "op_name": [f"task_{t}" for t in task_index.tolist()],
        "op_category": ["matmul"] * rows,
        "kernel_name": [f"kernel_{i}" for i in range(rows)],
        "backend": ["cuda"] * rows,
        "language": ["cuda"] * rows,
        "generator": [generator] * rows,
        "source_ref": [f"synthetic:{i}" for i in range(rows)],
        "claimed_correct": rng.random(rows) < 0.7 if generator == "import" else [None] * rows,
        "cuda_code": [
            KERNEL_BODY.format(k=i, tile=(8, 16, 32)[i % 3], scale=f"{1 + i % 97 / 100:.2f}") for i in range(rows)
        ],
        "reference_module_code": [references[t] for t in task_index.tolist()],
        "status": statuses.tolist(),
        "flags": [["degenerate_task"] if i % 50 == 0 else [] for i in range(rows)],
        "ranking_eligible": (correct & (np.arange(rows) % 50 != 0)),
        "error": [None if ok else "error: identifier 'tile' is undefined\n" * 8 for ok in correct.tolist()],
        "max_diff": rng.uniform(0, 1e-5, rows),
        "trials": np.full(rows, 5, np.int32),
        "atol": np.full(rows, 1e-4),
        "rtol": np.full(rows, 1e-4),
        "seeds": [[12345, 67890, 13579, 24680, 11223]] * rows,
        "runtime_ms": runtime,
        "eager_ms": eager,
        "compile_ms": compiled,
        "speedup_eager": eager / runtime,
        "speedup_compile": compiled / runtime,
        "torch_profile": [profile if ok else None for ok in correct.tolist()],
        "clang_tidy": [tidy] * rows,
        "gpu_name": ["NVIDIA H100 80GB HBM3"] * rows,
        "torch_version": ["2.13.0"] * rows,
        "seed_policy": ["secrets.randbits(63) per build"] * rows,
    }
    schema = kernel_record_schema()
    arrays = []
    for field in schema:
        if field.name in columns:
            values = columns[field.name]
            if isinstance(values, np.ndarray) and values.dtype.kind == "f":
                arrays.append(pa.array(values, field.type, from_pandas=True))  # NaN -> null
            else:
                arrays.append(pa.array(values, field.type))
        else:
            arrays.append(pa.nulls(rows, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)
