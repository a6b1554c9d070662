// Matrix-vector product, one warp per row with float4 loads and a shuffle reduction.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// One warp per row of A with float4 loads of A and x (K % 4 == 0 checked on the host), shuffle-reduced.
__global__ void matvec_warp(const float* __restrict__ a, const float* __restrict__ x, float* __restrict__ y, int64_t m, int64_t k) {
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= m) return;
    const float4* ar = reinterpret_cast<const float4*>(a + row * k);
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float acc = 0.0f;
    for (int64_t i = lane; i < k / 4; i += 32) {
        const float4 u = ar[i], v = x4[i];
        acc += u.x * v.x + u.y * v.y + u.z * v.z + u.w * v.w;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    if (lane == 0) y[row] = acc;
}

torch::Tensor forward(torch::Tensor A, torch::Tensor x) {
    TORCH_CHECK(A.is_cuda() && x.is_cuda(), "inputs must be CUDA tensors");
    A = A.contiguous();
    x = x.contiguous();
    const int64_t m = A.size(0), k = A.size(1);
    TORCH_CHECK(x.numel() == k && k % 4 == 0, "x must hold K values and K must be a multiple of 4");
    auto y = torch::empty({m, 1}, A.options());
    if (m == 0) return y;
    matvec_warp<<<(unsigned)((m + 7) / 8), 256>>>(A.data_ptr<float>(), x.data_ptr<float>(), y.data_ptr<float>(), m, k);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "matvec (warp, float4)"); }
