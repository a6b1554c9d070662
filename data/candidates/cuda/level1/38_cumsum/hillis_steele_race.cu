// cumsum via an in-place Hillis-Steele scan in shared memory. Designed to fail: reads and writes of one step are not separated by a barrier (race), so partial sums are double counted.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

constexpr int kMaxCols = 4096;  // the whole row is staged in shared memory (16 KiB)

// One block per row, Hillis-Steele scan in shared memory. Designed to fail: there is no barrier between reading
// s[i - offset] and overwriting s[i] within a step, so threads read partners that were already updated this step.
__global__ void cumsum_hillis_steele(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float s[kMaxCols];
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s[c] = xr[c];
    __syncthreads();
    for (int offset = 1; offset < cols; offset <<= 1) {
        for (int c = cols - 1 - threadIdx.x; c >= offset; c -= blockDim.x) s[c] += s[c - offset];
        __syncthreads();
    }
    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = s[c];
}

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be a float32 CUDA tensor");
    x = x.contiguous();
    const int64_t cols = x.size(-1);
    TORCH_CHECK(cols <= kMaxCols, "row too long for the shared-memory scan");
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    auto y = torch::empty_like(x);
    if (rows == 0) return y;
    cumsum_hillis_steele<<<(unsigned)rows, 1024>>>(x.data_ptr<float>(), y.data_ptr<float>(), (int)cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "cumsum (racy scan)"); }
