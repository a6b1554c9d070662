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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from builder import config
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
_TASK_KINDS = (
    (1, "square_matmul", "matmul"), (1, "batched_matmul", "matmul"), (1, "matvec", "matmul"),
    (1, "relu", "activation"), (1, "gelu", "activation"), (1, "softmax", "activation"),
    (1, "layernorm", "norm"), (1, "rmsnorm", "norm"), (1, "sum_reduction", "reduction"),
    (1, "argmax", "reduction"), (1, "conv2d_3x3", "conv"), (1, "max_pool2d", "pooling"),
    (2, "gemm_bias_relu", "matmul"), (2, "conv2d_relu_add", "conv"), (2, "matmul_scale_softmax", "matmul"),
    (2, "layernorm_gelu", "norm"), (2, "conv_maxpool_sigmoid", "conv"), (2, "gemm_sum_logsumexp", "reduction"),
    (3, "mlp_block", "architecture"), (3, "attention_head", "architecture"), (3, "resnet_basic_block", "architecture"),
)
_MODELS = ("gpt-5-mini", "claude-sonnet-4", "qwen3-coder-480b", "deepseek-v3")
_EXPERIMENTS = ("synthetic-sweep-a", "synthetic-sweep-b")


@dataclass(frozen=True)
class _Family:
    name: str
    label: str
    tags: tuple[str, ...]
    body: str  # CUDA device code, formatted with {fn}, {block}, {tile}, {op}


_FAMILIES = (
    _Family("naive", "idx threadIdx blockIdx", ("naive",), """
__global__ void {fn}_kernel(const float* __restrict__ x, float* __restrict__ out, int n) {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // one element per thread ({op})
    if (idx < n) {{
        float v = x[idx];
        out[idx] = v > 0.f ? v : 0.f;
    }}
}}
"""),
    _Family("tiled", "tile __shared__ __syncthreads", ("shared_memory_tiling", "loop_unrolling"), """
#define TILE {tile}
__global__ void {fn}_kernel(const float* A, const float* B, float* C, int N) {{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < (N + TILE - 1) / TILE; ++t) {{
        As[threadIdx.y][threadIdx.x] = (row < N && t * TILE + threadIdx.x < N) ? A[row * N + t * TILE + threadIdx.x] : 0.f;
        Bs[threadIdx.y][threadIdx.x] = (col < N && t * TILE + threadIdx.y < N) ? B[(t * TILE + threadIdx.y) * N + col] : 0.f;
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }}
    if (row < N && col < N) C[row * N + col] = acc;  // {op}
}}
"""),
    _Family("warp", "warp __shfl_down_sync reduce", ("warp_shuffle", "grid_stride"), """
__inline__ __device__ float warp_reduce_sum(float v) {{
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffff, v, offset);
    return v;
}}
__global__ void {fn}_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {{
    int row = blockIdx.x;
    float acc = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += x[row * cols + c];  // grid-stride ({op})
    acc = warp_reduce_sum(acc);
    __shared__ float partial[{block} / 32];
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {{
        acc = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.f;
        acc = warp_reduce_sum(acc);
        if (threadIdx.x == 0) out[row] = acc;
    }}
}}
"""),
    _Family("vectorized", "float4 vectorized __ldg", ("vectorized_loads", "grid_stride"), """
__global__ void {fn}_kernel(const float4* __restrict__ x, float4* __restrict__ out, int n4) {{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += gridDim.x * blockDim.x) {{
        float4 v = __ldg(&x[i]);
        v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f);
        out[i] = v;  // 16-byte loads and stores ({op})
    }}
}}
"""),
    _Family("wmma", "wmma tensor core fragment half", ("tensor_cores", "shared_memory_tiling"), """
#include <mma.h>
using namespace nvcuda;
__global__ void {fn}_kernel(const half* A, const half* B, float* C, int M, int N, int K) {{
    int warpM = (blockIdx.x * blockDim.x + threadIdx.x) / 32, warpN = blockIdx.y;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a_frag;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> b_frag;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c_frag;
    wmma::fill_fragment(c_frag, 0.0f);
    for (int k = 0; k < K; k += 16) {{
        wmma::load_matrix_sync(a_frag, A + warpM * 16 * K + k, K);
        wmma::load_matrix_sync(b_frag, B + warpN * 16 * K + k, K);
        wmma::mma_sync(c_frag, a_frag, b_frag, c_frag);  // tensor cores ({op})
    }}
    wmma::store_matrix_sync(C + warpM * 16 * N + warpN * 16, c_frag, N, wmma::mem_row_major);
}}
"""),
    _Family("fused", "fused epilogue bias activation", ("fusion", "shared_memory_tiling"), """
__global__ void {fn}_kernel(const float* x, const float* w, const float* bias, float* out, int M, int N, int K) {{
    __shared__ float tile[{tile}][{tile} + 1];
    int row = blockIdx.y * {tile} + threadIdx.y, col = blockIdx.x * {tile} + threadIdx.x;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += {tile}) {{
        tile[threadIdx.y][threadIdx.x] = (row < M && k0 + threadIdx.x < K) ? x[row * K + k0 + threadIdx.x] : 0.f;
        __syncthreads();
        for (int k = 0; k < {tile} && k0 + k < K; ++k) acc += tile[threadIdx.y][k] * w[(k0 + k) * N + col];
        __syncthreads();
    }}
    if (row < M && col < N) {{
        float v = acc + bias[col];          // fused bias
        out[row * N + col] = v > 0.f ? v : 0.f;  // fused activation epilogue ({op})
    }}
}}
"""),
    _Family("atomic", "atomicAdd partial sums", ("atomics", "grid_stride"), """
__global__ void {fn}_kernel(const float* __restrict__ x, float* out, int n) {{
    float local = 0.f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) local += x[i];
    atomicAdd(out, local);  // one atomic per thread ({op})
}}
"""),
    _Family("async", "cp.async pipeline memcpy_async", ("async_copy", "shared_memory_tiling"), """
#include <cuda_pipeline.h>
__global__ void {fn}_kernel(const float* __restrict__ x, float* __restrict__ out, int n) {{
    __shared__ float stage[2][{block}];
    int base = blockIdx.x * {block};
    __pipeline_memcpy_async(&stage[0][threadIdx.x], &x[base + threadIdx.x], sizeof(float));
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    if (base + threadIdx.x < n) out[base + threadIdx.x] = stage[0][threadIdx.x] * 2.f;  // cp.async staging ({op})
}}
"""),
)

_HOST = """
torch::Tensor forward(torch::Tensor x{extra_args}) {{
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
    auto out = torch::empty_like(x);
    const int threads = {block};
    const int blocks = (x.numel() + threads - 1) / threads;
    {fn}_kernel<<<blocks, threads>>>({launch_args});
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{
    m.def("forward", &forward, "{op} ({family}, block {block})");
}}
"""

_REFERENCE = '''import torch
import torch.nn as nn

OP_CATEGORY = "{category}"
DTYPE = "float32"


def module_fn(x: torch.Tensor) -> torch.Tensor:
    """{op}: synthetic reference for explorer tests."""
    return torch.relu(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, fn=module_fn):
        return fn(x)


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return []
'''

_ERRORS = {
    "compile_error": "kernel.cu(14): error: identifier \"TILE_K\" is undefined\n1 error detected in the compilation of \"kernel.cu\".",
    "runtime_error": "CUDA error: an illegal memory access was encountered (cudaErrorIllegalAddress) in forward",
    "timeout": "evaluation exceeded 300 s and was killed (process group)",
    "crash": "child exited with signal 11 (SIGSEGV) before writing its result",
    "incorrect": "max_diff 3.2e-01 exceeds atol 1e-04 + rtol 1e-04 * |ref| at 1523 of 16777216 elements",
}


def _kernel_id(task_id: str, code: str) -> str:
    return hashlib.sha256(f"{task_id}\n{code}".encode()).hexdigest()[:20]


def _profiles(rng: np.random.Generator, fn: str, runtime_ms: float, own: float) -> tuple[dict, dict]:
    sm, dram, occ = (float(round(v, 1)) for v in rng.uniform([10, 5, 12], [95, 92, 98]))
    registers = int(rng.choice([32, 40, 64, 96, 128]))
    ncu = {
        "kernels": [{
            "name": f"{fn}_kernel", "grid": [int(rng.integers(64, 4096)), 1, 1], "block": [256, 1, 1],
            "duration_ms": round(runtime_ms * 0.93, 5), "sm_pct": sm, "dram_pct": dram,
            "occupancy_pct": occ, "registers": registers, "shared_mem_bytes": int(rng.choice([0, 4096, 8448])),
        }],
        "rules": [
            {"name": "SOLBottleneck", "type": "WRN" if max(sm, dram) < 60 else "OPT",
             "text": "This kernel exhibits low compute throughput and memory bandwidth utilization relative to the peak."},
            {"name": "AchievedOccupancy", "type": "OPT",
             "text": f"The difference between calculated theoretical ({min(100.0, occ + 12):.1f}%) and measured achieved occupancy ({occ:.1f}%) can be the result of warp scheduling overheads."},
        ],
    }
    torch_profile = {
        "own_fraction": round(own, 3),
        "top": [
            {"name": f"{fn}_kernel", "kind": "kernel", "device_ms": round(runtime_ms * own, 5), "cpu_ms": 0.004, "count": 1},
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
    family_vectors = [hashed_token_embedding(f.label + " " + f.body) for f in _FAMILIES]
    family_centres = rng.uniform(-9, 9, size=(len(_FAMILIES), 2))
    tasks = []
    numbers: dict[int, int] = {}
    for level, op, category in _TASK_KINDS:
        numbers[level] = numbers.get(level, 0) + 1
        tasks.append((level, numbers[level], op, category))
    status_p = np.array([0.55, 0.18, 0.12, 0.08, 0.04, 0.03])
    flag_names = sorted(flag_vocabulary())
    disqualifying = disqualifying_flags()
    kernel_ids: list[str] = []
    for i in range(n_kernels):
        level, number, op, category = tasks[i % len(tasks)]
        task_id = f"{level}/{number}"
        family_index = int(rng.integers(len(_FAMILIES)))
        family = _FAMILIES[family_index]
        model = _MODELS[int(rng.integers(len(_MODELS)))]
        block, tile = int(rng.choice([128, 256, 512])), int(rng.choice([16, 32]))
        fn = f"{op}_{family.name}_v{i}"
        code = (
            "#include <torch/extension.h>\n#include <cuda_runtime.h>\n"
            + family.body.format(fn=fn, block=block, tile=tile, op=op)
            + _HOST.format(fn=fn, block=block, op=op, family=family.name, extra_args="",
                           launch_args="x.data_ptr<float>(), out.data_ptr<float>(), x.numel()")
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
            "kernel_id": kernel_id, "task_id": task_id, "level": level, "task_number": number, "op_name": op,
            "op_category": category, "kernel_name": fn, "backend": "cuda", "language": "cuda", "suite": "builtin",
            "generator": "llm", "model": model, "experiment": _EXPERIMENTS[i % len(_EXPERIMENTS)],
            "parent_ids": parents, "round": round_, "source_ref": f"attempt-{i}", "strategy_declared": None,
            "designed_verdict": None, "claimed_correct": None, "claimed_speedup": None,
            "prompt_tokens": int(rng.integers(800, 6000)), "completion_tokens": int(rng.integers(400, 4000)),
            "cost_usd": round(float(rng.uniform(0.001, 0.05)), 4), "cuda_code": code,
            "reference_module_code": _REFERENCE.format(op=op, category=category),
            "reference_functional_code": None, "status": status, "flags": flags,
            "ranking_eligible": status == "correct" and not flags,
            "error": _ERRORS.get(status), "max_diff": float(rng.uniform(0, 5e-5)) if timed else (0.32 if status == "incorrect" else None),
            "mean_diff": float(rng.uniform(0, 1e-6)) if timed else None, "trials": 5, "atol": 1e-4, "rtol": 1e-4,
            "seeds": [int(s) for s in rng.integers(0, 2**62, 5)], "isolation": "bwrap",
            "runtime_ms": runtime_ms, "runtime_mean_ms": runtime_ms * 1.02 if timed else None,
            "runtime_std_ms": runtime_ms * 0.03 if timed else None, "runtime_min_ms": runtime_ms * 0.97 if timed else None,
            "runtime_max_ms": runtime_ms * 1.2 if timed else None, "runtime_n": 100 if timed else None,
            "eager_ms": eager_ms, "compile_ms": compile_ms,
            "speedup_eager": eager_ms / runtime_ms if timed else None,
            "speedup_compile": compile_ms / runtime_ms if timed else None,
            "timing_method": "cuda events, L2 flush, 2 input sets, median of 100" if timed else None,
            "compile_s": float(rng.uniform(8, 40)), "eval_s": float(rng.uniform(2, 20)),
            "ncu_profile": json.dumps(ncu) if timed else json.dumps({"error": f"not profiled: status {status}"}),
            "torch_profile": json.dumps(torch_profile) if timed else None,
            "clang_tidy": json.dumps({"diagnostics": [{
                "line": warn_line, "column": 9, "check": "bugprone-narrowing-conversions", "severity": "warning",
                "message": "narrowing conversion from 'int64_t' to signed type 'int' is implementation-defined"}],
                "counts": {"warning": 1, "error": 0}}),
            "ncu_duration_ms": ncu["kernels"][0]["duration_ms"] if timed else None,
            "ncu_sm_pct": ncu["kernels"][0]["sm_pct"] if timed else None,
            "ncu_dram_pct": ncu["kernels"][0]["dram_pct"] if timed else None,
            "ncu_occupancy_pct": ncu["kernels"][0]["occupancy_pct"] if timed else None,
            "ncu_registers": ncu["kernels"][0]["registers"] if timed else None,
            "torch_own_fraction": own if timed else None, "clang_tidy_warnings": 1,
            "gpu_name": "NVIDIA H100 80GB HBM3 (synthetic)", "compute_capability": "9.0", "driver_version": "580.65",
            "cuda_version": "12.8", "torch_version": "2.13.0", "nvcc_version": "13.0", "seed_policy": "synthetic",
            "builder_version": "0.1.0", "created_at": f"2026-11-{1 + i % 20:02d}T12:00:00Z",
            "embedding": vector, "embedding_model": SYNTHETIC_EMBEDDING_MODEL,
            "map_x": float(x), "map_y": float(y), "cluster_id": family_index, "cluster_label": family.label,
            "strategy_tags": list(family.tags), "dup_group": None,
        }
        for name in schema.names:
            cols[name].append(row[name])
    return cols


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
        pq.write_table(part, data_dir / f"level_{level}-00000-of-00001.parquet",
                       row_group_size=config.PARQUET_ROW_GROUP_SIZE)
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
