"""A synthetic but realistic kernel archive, written in the exporter's layout.

Used by tests, by the benchmark (100k kernels) and by `kernel-archive explore` with no SOURCE until the real
sample archive exists in data/sample/. Every archive written here says so: its `experiment` values start with
`synthetic-`, its README.md card says so and the app shows a banner. Records follow schemas.arrow exactly.

Embeddings are not random noise: each kernel's vector is the hashed-token embedding of its code family plus a
little noise, so that semantic search over a synthetic archive (with `hashed_token_embedding` as the query
encoder) ranks kernels of the matching family first, like a real model would.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from builder import config
from builder.embed.label_terms import kernel_terms
from builder.embed.labels import cluster_labels
from explorer.sample_templates import ERRORS, EXPERIMENTS, FAMILIES, HOST, MODELS, REFERENCE, TASK_KINDS
from schemas import STATUSES, disqualifying_flags, flag_vocabulary
from schemas.arrow import kernel_record_schema

SYNTHETIC_EMBEDDING_MODEL = "synthetic-hashed-tokens-384"
EMBEDDING_DIM = 384
SYNTHETIC_MARKER = "synthetic"

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+")


def hashed_token_embedding(text: str, dim: int = EMBEDDING_DIM) -> np.ndarray:
    """Normalised signed feature hashing of identifier tokens (the synthetic archive's 'model')."""
    vec = np.zeros(dim, dtype=np.float32)
    for token in _TOKEN.findall(text.lower()):
        digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
        index = int.from_bytes(digest[:4], "little") % dim
        vec[index] += 1.0 if digest[4] & 1 else -1.0
    norm = float(np.linalg.norm(vec))
    return vec / norm if norm else vec


# (level, op_name, op_category) of the synthetic task suite; numbers are assigned in order per level.
def _kernel_id(task_id: str, code: str) -> str:
    return hashlib.sha256(f"{task_id}\n{code}".encode()).hexdigest()[:20]


def _profiles(rng: np.random.Generator, fn: str, runtime_ms: float, own: float) -> tuple[dict, dict]:
    sm, dram, occ = (float(round(v, 1)) for v in rng.uniform([10, 5, 12], [95, 92, 98]))
    registers = int(rng.choice([32, 40, 64, 96, 128]))
    ncu = {
        "kernels": [
            {
                "name": f"{fn}_kernel",
                "grid": [int(rng.integers(64, 4096)), 1, 1],
                "block": [256, 1, 1],
                "duration_ms": round(runtime_ms * 0.93, 5),
                "sm_pct": sm,
                "dram_pct": dram,
                "occupancy_pct": occ,
                "registers": registers,
                "shared_mem_bytes": int(rng.choice([0, 4096, 8448])),
            }
        ],
        "rules": [
            {
                "name": "SOLBottleneck",
                "type": "WRN" if max(sm, dram) < 60 else "OPT",
                "text": "This kernel exhibits low compute throughput and memory bandwidth utilization relative to the peak.",
            },
            {
                "name": "AchievedOccupancy",
                "type": "OPT",
                "text": f"The difference between calculated theoretical ({min(100.0, occ + 12):.1f}%) and measured achieved occupancy ({occ:.1f}%) can be the result of warp scheduling overheads.",
            },
        ],
    }
    torch_profile = {
        "own_fraction": round(own, 3),
        "top": [
            {
                "name": f"{fn}_kernel",
                "kind": "kernel",
                "device_ms": round(runtime_ms * own, 5),
                "cpu_ms": 0.004,
                "count": 1,
            },
            {"name": "aten::empty_like", "kind": "op", "device_ms": 0.0, "cpu_ms": 0.011, "count": 1},
            {"name": "cudaLaunchKernel", "kind": "runtime", "device_ms": 0.0, "cpu_ms": 0.006, "count": 1},
        ],
    }
    return ncu, torch_profile


def synthetic_columns(n_kernels: int, seed: int = config.EXPLORER_SYNTHETIC_SEED) -> dict[str, list]:
    """Column lists (schema order) for `n_kernels` synthetic records."""
    rng = np.random.default_rng(seed)
    schema = kernel_record_schema()
    cols: dict[str, list] = {name: [] for name in schema.names}
    family_vectors = [hashed_token_embedding(f.keywords + " " + f.body) for f in FAMILIES]
    family_centres = rng.uniform(-9, 9, size=(len(FAMILIES), 2))
    tasks = []
    numbers: dict[int, int] = {}
    for level, op, category in TASK_KINDS:
        numbers[level] = numbers.get(level, 0) + 1
        tasks.append((level, numbers[level], op, category))
    status_p = np.array([0.55, 0.18, 0.12, 0.08, 0.04, 0.03])
    flag_names = sorted(flag_vocabulary())
    disqualifying = disqualifying_flags()
    kernel_ids: list[str] = []
    for i in range(n_kernels):
        level, number, op, category = tasks[i % len(tasks)]
        task_id = f"{level}/{number}"
        family_index = int(rng.integers(len(FAMILIES)))
        family = FAMILIES[family_index]
        model = MODELS[int(rng.integers(len(MODELS)))]
        block, tile = int(rng.choice([128, 256, 512])), int(rng.choice([16, 32]))
        fn = f"{op}_{family.name}_v{i}"
        code = (
            "#include <torch/extension.h>\n#include <cuda_runtime.h>\n"
            + family.body.format(fn=fn, block=block, tile=tile, op=op)
            + HOST.format(
                fn=fn,
                block=block,
                op=op,
                family=family.name,
                extra_args="",
                launch_args="x.data_ptr<float>(), out.data_ptr<float>(), x.numel()",
            )
        )
        status = str(rng.choice(STATUSES, p=status_p))
        flags: list[str] = []
        if status == "correct" and rng.random() < 0.15:
            flags = [str(rng.choice(flag_names))]
        if status == "incorrect" and rng.random() < 0.3:
            flags = [str(rng.choice(sorted(disqualifying)))]
        eager_ms = float(rng.lognormal(-0.5, 1.0))
        compile_ms = eager_ms * float(rng.uniform(0.5, 1.1))
        timed = status == "correct"
        runtime_ms = eager_ms / float(rng.lognormal(0.0, 0.7)) if timed else None
        own = float(rng.uniform(0.2, 1.0))
        ncu, torch_profile = _profiles(rng, fn, runtime_ms or eager_ms, own)
        round_ = int(rng.integers(0, 3))
        parents = [kernel_ids[int(rng.integers(max(0, i - 200), i))]] if round_ > 0 and i > 0 else None
        kernel_id = _kernel_id(task_id, code)
        kernel_ids.append(kernel_id)
        vector = family_vectors[family_index] + rng.normal(0, 0.02, EMBEDDING_DIM).astype(np.float32)
        vector /= np.linalg.norm(vector)
        x, y = family_centres[family_index] + rng.normal(0, 1.1, 2)
        warn_line = int(rng.integers(4, 14))
        row = {
            "kernel_id": kernel_id,
            "task_id": task_id,
            "level": level,
            "task_number": number,
            "op_name": op,
            "op_category": category,
            "kernel_name": fn,
            "backend": "cuda",
            "language": "cuda",
            "suite": "builtin",
            "generator": "llm",
            "model": model,
            "experiment": EXPERIMENTS[i % len(EXPERIMENTS)],
            "parent_ids": parents,
            "round": round_,
            "source_ref": f"attempt-{i}",
            "strategy_declared": None,
            "designed_verdict": None,
            "claimed_correct": None,
            "claimed_speedup": None,
            "prompt_tokens": int(rng.integers(800, 6000)),
            "completion_tokens": int(rng.integers(400, 4000)),
            "cost_usd": round(float(rng.uniform(0.001, 0.05)), 4),
            "cuda_code": code,
            "reference_module_code": REFERENCE.format(op=op, category=category),
            "reference_functional_code": None,
            "status": status,
            "flags": flags,
            "ranking_eligible": status == "correct" and not flags,
            "error": ERRORS.get(status),
            "max_diff": float(rng.uniform(0, 5e-5)) if timed else (0.32 if status == "incorrect" else None),
            "mean_diff": float(rng.uniform(0, 1e-6)) if timed else None,
            "trials": 5,
            "atol": 1e-4,
            "rtol": 1e-4,
            "seeds": [int(s) for s in rng.integers(0, 2**62, 5)],
            "isolation": "bwrap",
            "device_connections": 2,
            "runtime_ms": runtime_ms,
            "runtime_mean_ms": runtime_ms * 1.02 if timed else None,
            "runtime_std_ms": runtime_ms * 0.03 if timed else None,
            "runtime_min_ms": runtime_ms * 0.97 if timed else None,
            "runtime_max_ms": runtime_ms * 1.2 if timed else None,
            "runtime_n": 100 if timed else None,
            "eager_ms": eager_ms,
            "eager_clean_ms": eager_ms,
            "compile_ms": compile_ms,
            "speedup_eager": eager_ms / runtime_ms if timed else None,
            "speedup_eager_iqr": 0.02 * eager_ms / runtime_ms if timed else None,
            "speedup_compile": compile_ms / runtime_ms if timed else None,
            "timing_method": "cuda events, L2 flush, 2 input sets, median of 100" if timed else None,
            "compile_s": float(rng.uniform(8, 40)),
            "eval_s": float(rng.uniform(2, 20)),
            "ncu_profile": json.dumps(ncu) if timed else json.dumps({"error": f"not profiled: status {status}"}),
            "torch_profile": json.dumps(torch_profile) if timed else None,
            "clang_tidy": json.dumps(
                {
                    "diagnostics": [
                        {
                            "line": warn_line,
                            "column": 9,
                            "check": "bugprone-narrowing-conversions",
                            "severity": "warning",
                            "message": "narrowing conversion from 'int64_t' to signed type 'int' is implementation-defined",
                        }
                    ],
                    "counts": {"warning": 1, "error": 0},
                }
            ),
            "ncu_duration_ms": ncu["kernels"][0]["duration_ms"] if timed else None,
            "ncu_sm_pct": ncu["kernels"][0]["sm_pct"] if timed else None,
            "ncu_dram_pct": ncu["kernels"][0]["dram_pct"] if timed else None,
            "ncu_occupancy_pct": ncu["kernels"][0]["occupancy_pct"] if timed else None,
            "ncu_registers": ncu["kernels"][0]["registers"] if timed else None,
            "torch_own_fraction": own if timed else None,
            "clang_tidy_warnings": 1,
            "gpu_name": "NVIDIA H100 80GB HBM3 (synthetic)",
            "compute_capability": "9.0",
            "driver_version": "580.65",
            "cuda_version": "12.8",
            "torch_version": "2.13.0",
            "nvcc_version": "13.0",
            "seed_policy": "synthetic",
            "builder_version": "0.1.0",
            "created_at": f"2026-11-{1 + i % 20:02d}T12:00:00Z",
            "embedding": vector,
            "embedding_model": SYNTHETIC_EMBEDDING_MODEL,
            "map_x": float(x),
            "map_y": float(y),
            "cluster_id": family_index,
            "cluster_label": None,  # labelled below, once every cluster's members are known
            "strategy_tags": list(family.tags),
            "dup_group": None,
        }
        for name in schema.names:
            cols[name].append(row.get(name))  # fields the synthetic rows leave out are null
    cols["cluster_label"] = _cluster_labels(cols)
    return cols


def _cluster_labels(cols: dict[str, list]) -> list[str]:
    """The labels `kernel-archive embed` would give these clusters (synthetic code calls no library)."""
    terms_of: dict[tuple, set[str]] = {}  # a few dozen distinct (category, op, tags) across all rows
    terms = []
    for category, op, tags in zip(cols["op_category"], cols["op_name"], cols["strategy_tags"], strict=True):
        key = (category, op, tuple(tags))
        if key not in terms_of:
            terms_of[key] = kernel_terms(category, op, tags, "")
        terms.append(terms_of[key])
    labels = cluster_labels(terms, cols["cluster_id"], cols["kernel_id"])
    return [labels[c] for c in cols["cluster_id"]]


def _table(cols: dict[str, list]) -> pa.Table:
    schema = kernel_record_schema()
    arrays = []
    for field in schema:
        values = cols[field.name]
        if field.name == "embedding":  # build the list column from one flat buffer: far faster than per-row lists
            flat = np.concatenate(values).astype(np.float32) if values else np.zeros(0, np.float32)
            offsets = np.arange(0, len(values) * EMBEDDING_DIM + 1, EMBEDDING_DIM, dtype=np.int32)
            arrays.append(pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat)))
        else:
            arrays.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def write_synthetic_archive(out_dir: Path, n_kernels: int, seed: int = config.EXPLORER_SYNTHETIC_SEED) -> Path:
    """Write data/level_N-00000-of-00001.parquet per level and a README.md card; return out_dir."""
    out_dir = Path(out_dir)
    data_dir = out_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    table = _table(synthetic_columns(n_kernels, seed))
    levels = sorted(set(table.column("level").to_pylist()))
    for level in levels:
        part = table.filter(pc.equal(table.column("level"), level))
        pq.write_table(
            part, data_dir / f"level_{level}-00000-of-00001.parquet", row_group_size=config.PARQUET_ROW_GROUP_SIZE
        )
    (out_dir / "README.md").write_text(
        f"# Synthetic kernel archive ({n_kernels} kernels, seed {seed})\n\n"
        "Generated by explorer/sample.py for tests and benchmarks. Nothing here was compiled or measured.\n"
    )
    return out_dir


def synthetic_archive_dir(n_kernels: int = config.EXPLORER_SYNTHETIC_KERNELS) -> Path:
    """The cached synthetic archive the explorer falls back to when data/sample/ does not exist yet."""
    out_dir = config.CACHE_DIR / f"explorer-{SYNTHETIC_MARKER}-{n_kernels}-{config.EXPLORER_SYNTHETIC_SEED}"
    if not (out_dir / "README.md").exists():
        write_synthetic_archive(out_dir, n_kernels)
    return out_dir
