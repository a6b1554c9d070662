// Row softmax, one block per row. Designed to fail: the 'block' reductions stop at the warp level, so each of the 8 warps normalises with its own partial max and sum (wrong reduction).
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Meant as a block reduction, but each warp only reduces its own 32 lanes: the per-warp partials are never
// combined, so every warp normalises with its own partial max/sum.
__device__ float block_sum(float v, float*) { return warp_sum(v); }
__device__ float block_max(float v, float*) { return warp_max(v); }

// One block per row: block max, block sum of exp(x - max), then the normalised write.
__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    __shared__ float scratch[32];
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    m = block_max(m, scratch);
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += expf(xr[c] - m);
    s = block_sum(s, scratch);
    const float inv = 1.0f / s;
    (void)inv;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = expf(xr[c] - m) * inv;
}

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be a float32 CUDA tensor");

    x = x.contiguous();
    const int64_t cols = x.size(-1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;

    auto y = torch::empty_like(x);
    if (rows == 0) return y;
    softmax_rows<<<(unsigned)rows, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "softmax (wrong reduction)"); }
