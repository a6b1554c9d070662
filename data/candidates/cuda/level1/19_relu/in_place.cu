// relu applied in place to save an allocation. Designed to fail: it overwrites the caller's input (input_mutation) and returns that same tensor.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

__device__ __forceinline__ float activation(float v) { return fmaxf(v, 0.0f); }

__global__ void activation_in_place(float* __restrict__ x, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) x[i] = activation(x[i]);
}

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "x must be a contiguous CUDA tensor");
    const int64_t n = x.numel();
    const int blocks = (int)std::min<int64_t>((n + 255) / 256, 65535);
    activation_in_place<<<blocks, 256>>>(x.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return x;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "relu (in place)"); }
