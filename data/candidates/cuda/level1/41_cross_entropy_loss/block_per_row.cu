// Per-sample cross entropy, one block per row: block max and sum of exp, minus the target logit.
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

// One block per row: loss = logsumexp(logits) - logits[target].
__global__ void cross_entropy_rows(const float* __restrict__ logits, const int64_t* __restrict__ targets,
                                   float* __restrict__ loss, int64_t classes) {
    __shared__ float scratch[32];
    const float* xr = logits + (size_t)blockIdx.x * classes;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) m = fmaxf(m, xr[c]);
    m = block_max(m, scratch);
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) s += expf(xr[c] - m);
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) loss[blockIdx.x] = m + logf(s) - xr[targets[blockIdx.x]];
}

torch::Tensor forward(torch::Tensor logits, torch::Tensor targets) {
    TORCH_CHECK(logits.is_cuda() && logits.dim() == 2, "logits must be a 2-D CUDA tensor");
    logits = logits.contiguous();
    targets = targets.contiguous();
    const int64_t rows = logits.size(0), classes = logits.size(1);
    auto loss = torch::empty({rows}, logits.options());
    if (rows == 0) return loss;
    cross_entropy_rows<<<(unsigned)rows, 256>>>(logits.data_ptr<float>(), targets.data_ptr<int64_t>(), loss.data_ptr<float>(), classes);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return loss;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "cross entropy (block per row)"); }
