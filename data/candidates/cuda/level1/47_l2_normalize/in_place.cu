// Row L2 normalisation. Designed to fail: it writes the result back into x and returns it (input_mutation).
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

// One warp per row (512 columns = 16 per lane): shuffle-reduced sum of squares, then x / max(||x||, eps).
__global__ void l2_normalize_warp(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t cols) {
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    float sq = 0.0f;
    for (int64_t c = lane; c < cols; c += 32) sq += xr[c] * xr[c];
    const float inv = 1.0f / fmaxf(sqrtf(warp_sum(sq)), 1e-12f);
    for (int64_t c = lane; c < cols; c += 32) yr[c] = xr[c] * inv;
}

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2, "x must be a 2-D CUDA tensor");

    x = x.contiguous();
    const int64_t cols = x.size(-1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;

    auto y = x;  // normalise in place: saves an allocation (and mutates the caller's tensor)
    if (rows == 0) return y;
    constexpr int warps_per_block = 8;
    l2_normalize_warp<<<(unsigned)((rows + warps_per_block - 1) / warps_per_block), warps_per_block * 32>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), rows, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "l2 normalize (in place)"); }
