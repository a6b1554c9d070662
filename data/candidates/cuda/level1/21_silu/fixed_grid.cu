// SiLU, one element per thread. Designed to fail: the grid is a fixed 1024 blocks with no grid-stride loop, so only the first 262144 elements are written (uninitialized_output).
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

__device__ __forceinline__ float activation(float v) { return v / (1.0f + expf(-v)); }

__global__ void activation_one_per_thread(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = activation(x[i]);
}

torch::Tensor forward(torch::Tensor x) {
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    activation_one_per_thread<<<1024, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "SiLU (fixed grid)"); }
