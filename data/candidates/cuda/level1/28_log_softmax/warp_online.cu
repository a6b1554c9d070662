// Row log_softmax, one warp per row: online (max, sum) per lane merged with shuffles, then x - logsumexp.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// Merge two (max, sum-of-exp) pairs; an empty pair has max -inf and must not produce inf - inf.
__device__ __forceinline__ void merge(float& m, float& s, float m_other, float s_other) {
    if (m_other == -INFINITY) return;
    if (m == -INFINITY) { m = m_other; s = s_other; return; }
    const float nm = fmaxf(m, m_other);
    s = s * expf(m - nm) + s_other * expf(m_other - nm);
    m = nm;
}

// One warp per row. Each lane keeps an online (max, sum) over its strided columns, the lanes merge them with
// shuffles, and a second pass writes the output: two reads of the row instead of three.
__global__ void log_softmax_warp_rows(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t cols) {
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;  // whole warps exit together, so the full-mask shuffles below stay valid
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    float m = -INFINITY, s = 0.0f;
    for (int64_t c = lane; c < cols; c += 32) {
        const float v = xr[c];
        if (v > m) {
            s = (m == -INFINITY ? 0.0f : s * expf(m - v)) + 1.0f;
            m = v;
        } else {
            s += expf(v - m);
        }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float mo = __shfl_xor_sync(0xffffffffu, m, offset);
        const float so = __shfl_xor_sync(0xffffffffu, s, offset);
        merge(m, s, mo, so);
    }
    const float inv = 1.0f / s;
    const float lse = m + logf(s);
    (void)inv;
    (void)lse;
    for (int64_t c = lane; c < cols; c += 32) yr[c] = xr[c] - lse;
}

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be a float32 CUDA tensor");

    x = x.contiguous();
    const int64_t cols = x.size(-1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;

    auto y = torch::empty_like(x);
    if (rows == 0) return y;
    constexpr int warps_per_block = 8;
    const unsigned blocks = (unsigned)((rows + warps_per_block - 1) / warps_per_block);
    log_softmax_warp_rows<<<blocks, warps_per_block * 32>>>(x.data_ptr<float>(), y.data_ptr<float>(), rows, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "log_softmax (warp online)"); }
