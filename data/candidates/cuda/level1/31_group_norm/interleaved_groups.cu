// GroupNorm. Designed to fail: the apply pass maps channel c to group c % G (interleaved) instead of c / (C/G) (contiguous ranges), normalising most channels with another group's statistics.
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

// Pass 1: one 1024-thread block per (n, group): the group is contiguous in NCHW (C/G channels x HW). Mean first,
// then the biased variance of (x - mean) in a second sweep (no cancellation).
__global__ void group_norm_stats(const float* __restrict__ x, float* __restrict__ stats, int64_t group_size, float eps) {
    __shared__ float scratch[32];
    const float* xg = x + (int64_t)blockIdx.x * group_size;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < group_size; i += blockDim.x) s += xg[i];
    const float mean = block_sum(s, scratch) / (float)group_size;
    float sq = 0.0f;
    for (int64_t i = threadIdx.x; i < group_size; i += blockDim.x) {
        const float d = xg[i] - mean;
        sq += d * d;
    }
    const float var = block_sum(sq, scratch) / (float)group_size;
    if (threadIdx.x == 0) {
        stats[2 * blockIdx.x] = mean;
        stats[2 * blockIdx.x + 1] = rsqrtf(var + eps);
    }
}

// y = (x - mean_g) * rstd_g * gamma[c] + beta[c]; one flat grid-stride loop over NCHW.
__global__ void group_norm_apply(const float* __restrict__ x, const float* __restrict__ stats, const float* __restrict__ gamma,
                                 const float* __restrict__ beta, float* __restrict__ y, int channels, int groups, int64_t hw, int64_t total) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int cpg = channels / groups;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t nc = i / hw;
        const int c = (int)(nc % channels);
        const int64_t g = (nc / channels) * groups + (c % groups)  /* interleaved assignment: wrong, groups are contiguous channel ranges */;
        y[i] = (x[i] - stats[2 * g]) * stats[2 * g + 1] * gamma[c] + beta[c];
    }
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4, "x must be a 4-D NCHW CUDA tensor");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int groups = 16;
    const int channels = (int)x.size(1);
    TORCH_CHECK(channels % groups == 0, "channels must divide into the groups");
    const int64_t hw = x.size(2) * x.size(3);
    const int64_t groups_total = x.size(0) * groups, group_size = (channels / groups) * hw;
    auto y = torch::empty_like(x);
    if (y.numel() == 0) return y;
    auto stats = torch::empty({groups_total * 2}, x.options());
    group_norm_stats<<<(unsigned)groups_total, 1024>>>(x.data_ptr<float>(), stats.data_ptr<float>(), group_size, 1e-5f);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const int64_t total = y.numel();
    group_norm_apply<<<(int)std::min<int64_t>((total + 255) / 256, 1 << 20), 256>>>(x.data_ptr<float>(), stats.data_ptr<float>(),
        weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), channels, groups, hw, total);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "group_norm (wrong group mapping)"); }
