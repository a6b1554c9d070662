// Matrix-vector product, one block per row with a block reduction.
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

// Block-wide reductions for blockDim.x a multiple of 32; every thread receives the result.
// The leading barrier protects `scratch` from a previous call whose readers may still be running.
__device__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_sum(lane < warps ? scratch[lane] : 0.0f);
}

__device__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_max(lane < warps ? scratch[lane] : -INFINITY);
}

// One 256-thread block per row of A: strided partial dot products, block-reduced.
__global__ void matvec_block(const float* __restrict__ a, const float* __restrict__ x, float* __restrict__ y, int64_t k) {
    __shared__ float scratch[32];
    const float* ar = a + (size_t)blockIdx.x * k;
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) acc += ar[i] * x[i];
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) y[blockIdx.x] = acc;
}

torch::Tensor forward(torch::Tensor A, torch::Tensor x) {
    TORCH_CHECK(A.is_cuda() && x.is_cuda(), "inputs must be CUDA tensors");
    A = A.contiguous();
    x = x.contiguous();
    const int64_t m = A.size(0), k = A.size(1);
    TORCH_CHECK(x.numel() == k, "x must hold K values");
    auto y = torch::empty({m, 1}, A.options());
    if (m == 0) return y;
    matvec_block<<<(unsigned)m, 256>>>(A.data_ptr<float>(), x.data_ptr<float>(), y.data_ptr<float>(), k);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "matvec (block per row)"); }
