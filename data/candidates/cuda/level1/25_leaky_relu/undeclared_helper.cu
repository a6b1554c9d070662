// leaky ReLU (slope 0.1). Designed to fail: the kernel calls leaky() before any declaration of it (nvcc: identifier is undefined).
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

__global__ void leaky_relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = leaky(x[i]);
}

__device__ __forceinline__ float leaky(float v) { return v > 0.0f ? v : 0.1f * v; }

torch::Tensor forward(torch::Tensor x) {
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    leaky_relu_kernel<<<(unsigned)((n + 255) / 256), 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "leaky ReLU (slope 0.1) (does not compile)"); }
