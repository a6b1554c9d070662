// GroupNorm with split statistics: 4096-element chunks reduced per block and combined with atomicAdd.
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

constexpr int CHUNK = 4096;  // elements per block in the statistics pass

// Pass 1: many blocks per group; each reduces a CHUNK of the group (contiguous in NCHW) to a partial sum and sum of
// squares around a per-group shift (the first element: keeps E[x^2] - E[x]^2 free of cancellation) and adds them to
// the group's accumulators with atomicAdd.
__global__ void group_norm_partials(const float* __restrict__ x, float* __restrict__ acc, int64_t group_size) {
    __shared__ float scratch[32];
    const int64_t g = blockIdx.y;
    const float* xg = x + g * group_size;
    const float shift = xg[0];
    const int64_t begin = (int64_t)blockIdx.x * CHUNK;
    const int64_t end = min(begin + (int64_t)CHUNK, group_size);
    float s = 0.0f, sq = 0.0f;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        const float v = xg[i] - shift;
        s += v;
        sq += v * v;
    }
    s = block_sum(s, scratch);
    sq = block_sum(sq, scratch);
    if (threadIdx.x == 0) {
        atomicAdd(&acc[2 * g], s);
        atomicAdd(&acc[2 * g + 1], sq);
    }
}

// Turns (shifted sum, shifted sum of squares) into (mean, rstd) in place.
__global__ void group_norm_finalize(const float* __restrict__ x, float* __restrict__ acc, int64_t groups_total, int64_t group_size, float eps) {
    const int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= groups_total) return;
    const float shift = x[g * group_size];
    const float m = acc[2 * g] / (float)group_size;
    const float var = fmaxf(acc[2 * g + 1] / (float)group_size - m * m, 0.0f);
    acc[2 * g] = m + shift;
    acc[2 * g + 1] = rsqrtf(var + eps);
}

// y = (x - mean_g) * rstd_g * gamma[c] + beta[c]; one flat grid-stride loop over NCHW.
__global__ void group_norm_apply(const float* __restrict__ x, const float* __restrict__ stats, const float* __restrict__ gamma,
                                 const float* __restrict__ beta, float* __restrict__ y, int channels, int groups, int64_t hw, int64_t total) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int cpg = channels / groups;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t nc = i / hw;
        const int c = (int)(nc % channels);
        const int64_t g = (nc / channels) * groups + (c / cpg);
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
    auto stats = torch::zeros({groups_total * 2}, x.options());
    TORCH_CHECK(groups_total <= 65535, "too many groups for grid.y");
    dim3 grid((unsigned)((group_size + CHUNK - 1) / CHUNK), (unsigned)groups_total);
    group_norm_partials<<<grid, 256>>>(x.data_ptr<float>(), stats.data_ptr<float>(), group_size);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    group_norm_finalize<<<(unsigned)((groups_total + 255) / 256), 256>>>(x.data_ptr<float>(), stats.data_ptr<float>(), groups_total, group_size, 1e-5f);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const int64_t total = y.numel();
    group_norm_apply<<<(int)std::min<int64_t>((total + 255) / 256, 1 << 20), 256>>>(x.data_ptr<float>(), stats.data_ptr<float>(),
        weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), channels, groups, hw, total);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "group_norm (atomic partials)"); }
