// cumsum along the last dim, one 1024-thread block per row: serial chunk scans stitched by a two-level shuffle scan.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

constexpr int kThreads = 1024;

// One block per row. Each thread owns a contiguous chunk of ceil(cols / 1024) elements: it scans its chunk
// serially, the chunk totals are scanned across the block (warp shuffles, then the 32 warp totals by warp 0),
// and each thread re-walks its chunk with its exclusive prefix.
__device__ __forceinline__ float combine(float a, float b) { return a + b; }

__global__ void scan_rows_block(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    __shared__ float warp_totals[32];
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
    const int64_t chunk = (cols + kThreads - 1) / kThreads;
    const int64_t c0 = threadIdx.x * chunk;
    const int64_t c1 = min(c0 + chunk, cols);
    float total = 0.0f;
    for (int64_t c = c0; c < c1; ++c) total = combine(total, xr[c]);
    // Inclusive scan of the per-thread totals within each warp.
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float incl = total;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
        const float other = __shfl_up_sync(0xffffffffu, incl, offset);
        if (lane >= offset) incl = combine(incl, other);
    }
    if (lane == 31) warp_totals[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        float w = warp_totals[lane];
#pragma unroll
        for (int offset = 1; offset < 32; offset <<= 1) {
            const float other = __shfl_up_sync(0xffffffffu, w, offset);
            if (lane >= offset) w = combine(w, other);
        }
        warp_totals[lane] = w;  // inclusive prefix over warps
    }
    __syncthreads();
    // Exclusive prefix of this thread = (prefix of earlier warps) combined with (earlier lanes of this warp).
    float prefix = __shfl_up_sync(0xffffffffu, incl, 1);
    if (lane == 0) prefix = 0.0f;
    if (warp > 0) prefix = combine(warp_totals[warp - 1], prefix);
    float acc = prefix;
    for (int64_t c = c0; c < c1; ++c) {
        acc = combine(acc, xr[c]);
        yr[c] = acc;
    }
}

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be a float32 CUDA tensor");

    x = x.contiguous();
    const int64_t cols = x.size(-1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;

    auto y = torch::empty_like(x);
    if (rows == 0) return y;
    scan_rows_block<<<(unsigned)rows, kThreads>>>(x.data_ptr<float>(), y.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "cumsum (block scan)"); }
