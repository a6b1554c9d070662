"""Synthetic but realistic CUDA candidates for the embedding benchmark and tests.

Templates cover the strategy vocabulary (naive, grid-stride, float4, shared-memory tiling, warp
shuffles, atomics, tensor cores, cp.async, fused epilogues); each kernel varies its op, names, sizes,
comments and launch code. These are text only: nothing here is compiled or run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

ACTIVATIONS = {
    "relu": "fmaxf(v, 0.0f)",
    "gelu": "0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)))",
    "sigmoid": "1.0f / (1.0f + expf(-v))",
    "tanh": "tanhf(v)",
    "silu": "v / (1.0f + expf(-v))",
    "leaky_relu": "v > 0.0f ? v : 0.01f * v",
}
_NAMES = ("x", "input", "in", "src", "a", "data")
_OUT_NAMES = ("y", "out", "output", "dst", "result")
_HEADER = "#include <torch/extension.h>\n#include <cuda_runtime.h>\n"
_FOOTER = 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ m.def("forward", &forward, "{doc}"); }}\n'


@dataclass
class SyntheticKernel:
    task_id: str
    name: str
    source: str
    strategies: tuple[str, ...]


def _elementwise(rng: random.Random, op: str) -> tuple[str, tuple[str, ...]]:
    x, y, block = rng.choice(_NAMES), rng.choice(_OUT_NAMES), rng.choice((128, 256, 512, 1024))
    style = rng.choice(("naive", "grid_stride", "vectorized_loads"))  # grid-stride code is still naive
    expr = ACTIVATIONS[op]
    if style == "naive":
        body = f"    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) {{ float v = {x}[i]; {y}[i] = {expr}; }}\n"
    elif style == "grid_stride":
        body = (
            "    int stride = blockDim.x * gridDim.x;\n"
            f"    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {{\n"
            f"        float v = {x}[i];\n        {y}[i] = {expr};\n    }}\n"
        )
    else:
        body = (
            "    int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;\n"
            f"    if (i + 3 < n) {{\n        float4 q = reinterpret_cast<const float4*>({x})[i / 4];\n"
            + "".join(f"        {{ float v = q.{c}; q.{c} = {expr}; }}\n" for c in "xyzw")
            + f"        reinterpret_cast<float4*>({y})[i / 4] = q;\n    }} else {{\n"
            f"        for (; i < n; ++i) {{ float v = {x}[i]; {y}[i] = {expr}; }}\n    }}\n"
        )
    kernel = (
        f"__global__ void {op}_kernel(const float* __restrict__ {x}, float* __restrict__ {y}, int n) {{\n{body}}}\n"
    )
    host = (
        f"torch::Tensor forward(torch::Tensor {x}_t) {{\n"
        f'    TORCH_CHECK({x}_t.is_cuda(), "{x} must be a CUDA tensor");\n'
        f"    auto {y}_t = torch::empty_like({x}_t);\n    int n = {x}_t.numel();\n"
        f"    int threads = {block};\n    int blocks = (n + threads - 1) / threads;\n"
        f"    {op}_kernel<<<blocks, threads>>>({x}_t.data_ptr<float>(), {y}_t.data_ptr<float>(), n);\n"
        f"    return {y}_t;\n}}\n"
    )
    tags = ("naive", "grid_stride") if style == "grid_stride" else (style,)
    return kernel + "\n" + host, tags


def _reduction(rng: random.Random, op: str) -> tuple[str, tuple[str, ...]]:
    block = rng.choice((128, 256, 512))
    style = rng.choice(("shared_tree", "warp_shuffle", "atomics"))
    acc = rng.choice(("sum", "acc", "partial"))
    lines = [f"__global__ void reduce_{op}(const float* __restrict__ x, float* __restrict__ out, int n) {{"]
    lines.append(f"    float {acc} = 0.0f;")
    lines.append(
        f"    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {acc} += x[i];"
    )
    tags: tuple[str, ...] = ("grid_stride",)
    if style == "shared_tree":
        lines += [
            f"    __shared__ float sdata[{block}];",
            f"    sdata[threadIdx.x] = {acc};",
            "    __syncthreads();",
            "    for (int s = blockDim.x / 2; s > 0; s >>= 1) {",
            "        if (threadIdx.x < s) sdata[threadIdx.x] += sdata[threadIdx.x + s];",
            "        __syncthreads();",
            "    }",
            "    if (threadIdx.x == 0) out[blockIdx.x] = sdata[0];",
        ]
        tags += ("shared_memory_tiling",)  # a shared-memory tree reduction stages data through __shared__
    else:
        lines += [
            "#pragma unroll",
            f"    for (int offset = 16; offset > 0; offset /= 2) {acc} += __shfl_down_sync(0xffffffff, {acc}, offset);",
        ]
        tags += ("warp_shuffle",)
        if style == "atomics":
            lines.append(f"    if ((threadIdx.x & 31) == 0) atomicAdd(out, {acc});")
            tags += ("atomics",)
        else:
            lines.append(
                f"    if ((threadIdx.x & 31) == 0) out[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = {acc};"
            )
    lines.append("}")
    host = (
        "torch::Tensor forward(torch::Tensor x) {\n"
        '    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");\n'
        "    auto out = torch::zeros({1}, x.options());\n"
        f"    reduce_{op}<<<{rng.choice((64, 128, 256))}, {block}>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.numel());\n"
        "    return out;\n}\n"
    )
    return "\n".join(lines) + "\n\n" + host, tags


def _matmul(rng: random.Random, op: str) -> tuple[str, tuple[str, ...]]:
    tile = rng.choice((8, 16, 32))
    style = rng.choice(("naive", "tiled", "tensor_cores", "async"))
    fused = rng.random() < 0.5
    epilogue = (
        f"{{ float v = acc + bias[col]; c[row * n + col] = {ACTIVATIONS[op]}; }}"
        if fused
        else "c[row * n + col] = acc;"
    )
    params = "const float* __restrict__ a, const float* __restrict__ b, " + (
        "const float* __restrict__ bias, " if fused else ""
    )
    if style == "naive":
        body = (
            "    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "    if (row >= n || col >= n) return;\n    float acc = 0.0f;\n"
            f"    for (int k = 0; k < n; ++k) acc += a[row * n + k] * b[k * n + col];\n    {epilogue}\n"
        )
        tags: tuple[str, ...] = ("naive",)
    elif style in ("tiled", "async"):
        load_a = (
            '        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\\n" :: "r"((unsigned)__cvta_generic_to_shared(&as[threadIdx.y][threadIdx.x])), "l"(&a[row * n + t + threadIdx.x]));\n'
            '        asm volatile("cp.async.wait_all;\\n" ::);\n'
            if style == "async"
            else "        as[threadIdx.y][threadIdx.x] = a[row * n + t + threadIdx.x];\n"
        )
        body = (
            f"    __shared__ float as[{tile}][{tile}];\n    __shared__ float bs[{tile}][{tile} + 1];\n"
            f"    int row = blockIdx.y * {tile} + threadIdx.y, col = blockIdx.x * {tile} + threadIdx.x;\n    float acc = 0.0f;\n"
            f"    for (int t = 0; t < n; t += {tile}) {{\n{load_a}"
            "        bs[threadIdx.y][threadIdx.x] = b[(t + threadIdx.y) * n + col];\n        __syncthreads();\n"
            f"#pragma unroll\n        for (int k = 0; k < {tile}; ++k) acc += as[threadIdx.y][k] * bs[k][threadIdx.x];\n"
            f"        __syncthreads();\n    }}\n    if (row < n && col < n) {epilogue}\n"
        )
        tags = ("shared_memory_tiling", "loop_unrolling") + (("async_copy",) if style == "async" else ())
    else:
        body = (
            "    using namespace nvcuda;\n    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;\n"
            "    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;\n"
            "    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;\n    wmma::fill_fragment(fc, 0.0f);\n"
            "    int warp_row = blockIdx.y * 16, warp_col = blockIdx.x * 16;\n"
            "    for (int k = 0; k < n; k += 16) {\n"
            "        wmma::load_matrix_sync(fa, reinterpret_cast<const half*>(a) + warp_row * n + k, n);\n"
            "        wmma::load_matrix_sync(fb, reinterpret_cast<const half*>(b) + warp_col * n + k, n);\n"
            "        wmma::mma_sync(fc, fa, fb, fc);\n    }\n"
            "    wmma::store_matrix_sync(c + warp_row * n + warp_col, fc, n, wmma::mem_row_major);\n"
        )
        tags, fused = ("tensor_cores",), False
        params = "const float* __restrict__ a, const float* __restrict__ b, "
    name = f"matmul_{style}" + (f"_{op}" if fused else "")
    kernel = f"__global__ void {name}({params}float* __restrict__ c, int n) {{\n{body}}}\n"
    args = "a.data_ptr<float>(), b.data_ptr<float>(), " + ("bias.data_ptr<float>(), " if fused else "")
    host = (
        "torch::Tensor forward(torch::Tensor a, torch::Tensor b" + (", torch::Tensor bias" if fused else "") + ") {\n"
        '    TORCH_CHECK(a.size(1) == b.size(0), "shape mismatch");\n    int n = a.size(0);\n'
        "    auto c = torch::empty({n, n}, a.options());\n"
        f"    dim3 block({tile}, {tile});\n    dim3 grid((n + {tile} - 1) / {tile}, (n + {tile} - 1) / {tile});\n"
        f"    {name}<<<grid, block>>>({args}c.data_ptr<float>(), n);\n    return c;\n}}\n"
    )
    return kernel + "\n" + host, tags + (("fusion",) if fused else ())


_TEMPLATES = (("elementwise", _elementwise), ("reduction", _reduction), ("matmul", _matmul))


def synthetic_kernels(count: int, seed: int = 0, tasks: int = 60) -> list[SyntheticKernel]:
    """`count` kernels spread over `tasks` synthetic task ids; same seed -> same kernels."""
    rng = random.Random(seed)
    kernels = []
    for index in range(count):
        family_index = rng.randrange(len(_TEMPLATES))
        family, template = _TEMPLATES[family_index]
        op = rng.choice(sorted(ACTIVATIONS))
        code, tags = template(rng, op)
        comment = rng.choice(
            ("", f"// {family} kernel for {op}, variant {index}\n", f"/* generated variant {index} */\n")
        )
        source = comment + _HEADER + "\n" + code + "\n" + _FOOTER.format(doc=f"{family} {op}")
        task = f"{family_index + 1}/{rng.randrange(tasks // len(_TEMPLATES)) + 1}"
        kernels.append(SyntheticKernel(task, f"{family}_{op}_{index}", source, tags))
    return kernels
