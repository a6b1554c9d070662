// a * b + c. Designed to fail: it accumulates into c in place and returns c (input_mutation).
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// Accumulates into c in place (c += a * b) and returns c, as a fused "axpy-style" update would.
__global__ void fma_into_c(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) c[i] = fmaf(a[i], b[i], c[i]);
}

torch::Tensor forward(torch::Tensor a, torch::Tensor b, torch::Tensor c) {
    TORCH_CHECK(a.is_contiguous() && b.is_contiguous() && c.is_contiguous(), "contiguous inputs expected");
    const int64_t n = a.numel();
    const int blocks = (int)std::min<int64_t>((n + 255) / 256, 65535);
    fma_into_c<<<blocks, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return c;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "elementwise fma (in place)"); }
