"""Code families, task kinds and messages the synthetic archive (explorer/sample.py) draws from."""

from __future__ import annotations

from dataclasses import dataclass

TASK_KINDS = (
    (1, "square_matmul", "matmul"),
    (1, "batched_matmul", "matmul"),
    (1, "matvec", "matmul"),
    (1, "relu", "activation"),
    (1, "gelu", "activation"),
    (1, "softmax", "activation"),
    (1, "layernorm", "norm"),
    (1, "rmsnorm", "norm"),
    (1, "sum_reduction", "reduction"),
    (1, "argmax", "reduction"),
    (1, "conv2d_3x3", "conv"),
    (1, "max_pool2d", "pooling"),
    (2, "gemm_bias_relu", "matmul"),
    (2, "conv2d_relu_add", "conv"),
    (2, "matmul_scale_softmax", "matmul"),
    (2, "layernorm_gelu", "norm"),
    (2, "conv_maxpool_sigmoid", "conv"),
    (2, "gemm_sum_logsumexp", "reduction"),
    (3, "mlp_block", "architecture"),
    (3, "attention_head", "architecture"),
    (3, "resnet_basic_block", "architecture"),
)
MODELS = ("gpt-5-mini", "claude-sonnet-4", "qwen3-coder-480b", "deepseek-v3")
EXPERIMENTS = ("synthetic-sweep-a", "synthetic-sweep-b")


@dataclass(frozen=True)
class Family:
    name: str
    keywords: str  # words mixed into the family's hashed-token embedding
    tags: tuple[str, ...]
    body: str  # CUDA device code, formatted with {fn}, {block}, {tile}, {op}


FAMILIES = (
    Family(
        "naive",
        "idx threadIdx blockIdx",
        ("naive",),
        """
__global__ void {fn}_kernel(const float* __restrict__ x, float* __restrict__ out, int n) {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // one element per thread ({op})
    if (idx < n) {{
        float v = x[idx];
        out[idx] = v > 0.f ? v : 0.f;
    }}
}}
""",
    ),
    Family(
        "tiled",
        "tile __shared__ __syncthreads",
        ("shared_memory_tiling", "loop_unrolling"),
        """
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
""",
    ),
    Family(
        "warp",
        "warp __shfl_down_sync reduce",
        ("warp_shuffle", "grid_stride"),
        """
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
""",
    ),
    Family(
        "vectorized",
        "float4 vectorized __ldg",
        ("vectorized_loads", "grid_stride"),
        """
__global__ void {fn}_kernel(const float4* __restrict__ x, float4* __restrict__ out, int n4) {{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += gridDim.x * blockDim.x) {{
        float4 v = __ldg(&x[i]);
        v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f);
        out[i] = v;  // 16-byte loads and stores ({op})
    }}
}}
""",
    ),
    Family(
        "wmma",
        "wmma tensor core fragment half",
        ("tensor_cores", "shared_memory_tiling"),
        """
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
""",
    ),
    Family(
        "fused",
        "fused epilogue bias activation",
        ("fusion", "shared_memory_tiling"),
        """
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
""",
    ),
    Family(
        "atomic",
        "atomicAdd partial sums",
        ("atomics", "grid_stride"),
        """
__global__ void {fn}_kernel(const float* __restrict__ x, float* out, int n) {{
    float local = 0.f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) local += x[i];
    atomicAdd(out, local);  // one atomic per thread ({op})
}}
""",
    ),
    Family(
        "async",
        "cp.async pipeline memcpy_async",
        ("async_copy", "shared_memory_tiling"),
        """
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
""",
    ),
)

HOST = """
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

REFERENCE = '''import torch
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

ERRORS = {
    # As torch's extension builder reports it: its own line and the nvcc command first, nvcc's message after.
    "compile_error": (
        "RuntimeError: Error building extension 'ka_5f0c2a9e1b7d4c38': [1/2] /usr/local/cuda/bin/nvcc -MD -MF "
        "ka_5f0c2a9e1b7d4c38.cuda.o.d -isystem /opt/torch/.venv/lib/python3.12/site-packages/torch/include "
        "-gencode=arch=compute_90,code=sm_90 -O3 -std=c++17 -c "
        "/opt/ka-cache/builds/5f0c2a9e1b7d4c38/ka_5f0c2a9e1b7d4c38/kernel.cu -o ka_5f0c2a9e1b7d4c38.cuda.o\n"
        "FAILED: ka_5f0c2a9e1b7d4c38.cuda.o\n"
        '/opt/ka-cache/builds/5f0c2a9e1b7d4c38/ka_5f0c2a9e1b7d4c38/kernel.cu(14): error: identifier "TILE_K" is '
        "undefined\n"
        '1 error detected in the compilation of "/opt/ka-cache/builds/5f0c2a9e1b7d4c38/ka_5f0c2a9e1b7d4c38/kernel.cu".'
    ),
    "runtime_error": "CUDA error: an illegal memory access was encountered (cudaErrorIllegalAddress) in forward",
    "timeout": "evaluation exceeded 300 s and was killed (process group)",
    "crash": "child exited with signal 11 (SIGSEGV) before writing its result",
    "incorrect": "max_diff 3.2e-01 exceeds atol 1e-04 + rtol 1e-04 * |ref| at 1523 of 16777216 elements",
}
