// Squeeze-excitation. Designed to fail: the scaling kernel indexes the gates by channel only, so every sample is scaled with sample 0's gates.
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

// Squeeze: one block per (n, c) plane, block-reduced mean.
__global__ void plane_mean(const float* __restrict__ x, float* __restrict__ mean, int64_t hw) {
    __shared__ float scratch[32];
    const float* p = x + (int64_t)blockIdx.x * hw;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < hw; i += blockDim.x) s += p[i];
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) mean[blockIdx.x] = s / (float)hw;
}

// Excitation: one block per sample; fc1 + ReLU into shared memory, then fc2 + sigmoid to the gates. Both layers
// are tiny (C=256, C/r=16), so each thread simply owns output features.
__global__ void excitation(const float* __restrict__ mean, const float* __restrict__ w1, const float* __restrict__ b1,
                           const float* __restrict__ w2, const float* __restrict__ b2, float* __restrict__ gates, int channels, int hidden) {
    extern __shared__ float hid[];
    const float* m = mean + (int64_t)blockIdx.x * channels;
    for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
        float acc = b1[j];
        for (int c = 0; c < channels; ++c) acc += m[c] * w1[(int64_t)j * channels + c];
        hid[j] = fmaxf(acc, 0.0f);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < channels; c += blockDim.x) {
        float acc = b2[c];
        for (int j = 0; j < hidden; ++j) acc += hid[j] * w2[(int64_t)c * hidden + j];
        gates[(int64_t)blockIdx.x * channels + c] = 1.0f / (1.0f + expf(-acc));
    }
}

// Scale: x * gate[n, c], float4 over each plane when HW % 4 == 0 (planes then start 16-byte aligned).
__global__ void scale_planes(const float* __restrict__ x, const float* __restrict__ gates, float* __restrict__ y, int channels, int64_t hw) {
    const int64_t plane = blockIdx.y;
    const int c = (int)(plane % channels);
    (void)c;
    const float g = gates[c  /* gates of sample 0 for every sample */];
    const float* xp = x + plane * hw;
    float* yp = y + plane * hw;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t start = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (hw % 4 == 0) {
        const float4* x4 = reinterpret_cast<const float4*>(xp);
        float4* y4 = reinterpret_cast<float4*>(yp);
        for (int64_t i = start; i < hw / 4; i += stride) {
            const float4 v = x4[i];
            y4[i] = make_float4(v.x * g, v.y * g, v.z * g, v.w * g);
        }
    } else {
        for (int64_t i = start; i < hw; i += stride) yp[i] = xp[i] * g;
    }
}

torch::Tensor forward(torch::Tensor x, torch::Tensor fc1_weight, torch::Tensor fc1_bias, torch::Tensor fc2_weight, torch::Tensor fc2_bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4, "x must be a 4-D CUDA tensor");
    x = x.contiguous();
    fc1_weight = fc1_weight.contiguous(); fc1_bias = fc1_bias.contiguous();
    fc2_weight = fc2_weight.contiguous(); fc2_bias = fc2_bias.contiguous();
    const int64_t nb = x.size(0), channels = x.size(1), hw = x.size(2) * x.size(3);
    const int hidden = (int)fc1_weight.size(0);
    auto y = torch::empty_like(x);
    if (y.numel() == 0) return y;
    auto mean = torch::empty({nb * channels}, x.options());
    plane_mean<<<(unsigned)(nb * channels), 256>>>(x.data_ptr<float>(), mean.data_ptr<float>(), hw);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    auto gates = torch::empty({nb, channels}, x.options());
    excitation<<<(unsigned)nb, 256, hidden * sizeof(float)>>>(mean.data_ptr<float>(), fc1_weight.data_ptr<float>(), fc1_bias.data_ptr<float>(),
        fc2_weight.data_ptr<float>(), fc2_bias.data_ptr<float>(), gates.data_ptr<float>(), (int)channels, hidden);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    TORCH_CHECK(nb * channels <= 65535, "too many planes for grid.y");
    dim3 grid((unsigned)std::min<int64_t>((hw / 4 + 255) / 256 + 1, 64), (unsigned)(nb * channels));
    scale_planes<<<grid, 256>>>(x.data_ptr<float>(), gates.data_ptr<float>(), y.data_ptr<float>(), (int)channels, hw);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "squeeze excitation (wrong gate index)"); }
