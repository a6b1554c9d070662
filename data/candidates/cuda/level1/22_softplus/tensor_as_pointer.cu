// softplus (beta 1, threshold 20). Designed to fail: the launch passes the output Tensor itself where the kernel expects float* (a type error nvcc rejects).
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

__device__ __forceinline__ float activation(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

__global__ void activation_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = activation(x[i]);
}

torch::Tensor forward(torch::Tensor x) {
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    activation_kernel<<<(unsigned)((n + 255) / 256), 256>>>(x.data_ptr<float>(), y, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "softplus (beta 1, threshold 20) (does not compile)"); }
