// Conv2d + ReLU + global average pool fused. Designed to fail: the sum is divided by the padded plane size (H + 2) * (W + 2) instead of H * W.
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

// One 256-thread block per (sample, output channel): threads sweep the output pixels, each computing the 3x3
// convolution (pad 1) + bias + ReLU at its pixel, and the block sums them: the conv output never reaches memory.
__global__ void conv_relu_gap(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                              float* __restrict__ y, int ic, int h, int wd, int oc) {
    __shared__ float scratch[32];
    const int o = blockIdx.x % oc, n = blockIdx.x / oc;
    const int64_t hw = (int64_t)h * wd;
    const float* wo = w + (int64_t)o * ic * 9;
    float s = 0.0f;
    for (int64_t p = threadIdx.x; p < hw; p += blockDim.x) {
        const int oy = (int)(p / wd), ox = (int)(p % wd);
        float acc = bias[o];
        for (int c = 0; c < ic; ++c) {
            const float* xp = x + ((int64_t)n * ic + c) * hw;
            const float* wp = wo + c * 9;
            for (int ky = 0; ky < 3; ++ky) {
                const int iy = oy - 1 + ky;
                if (iy < 0 || iy >= h) continue;
                for (int kx = 0; kx < 3; ++kx) {
                    const int ix = ox - 1 + kx;
                    if (ix >= 0 && ix < wd) acc += xp[(int64_t)iy * wd + ix] * wp[ky * 3 + kx];
                }
            }
        }
        s += fmaxf(acc, 0.0f);
    }
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) y[blockIdx.x] = s / (float)((h + 2) * (wd + 2));
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4, "x must be a 4-D CUDA tensor");
    TORCH_CHECK(weight.size(2) == 3 && weight.size(3) == 3, "3x3 filters expected");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int nb = (int)x.size(0), ic = (int)x.size(1), h = (int)x.size(2), wd = (int)x.size(3), oc = (int)weight.size(0);
    auto y = torch::empty({nb, oc}, x.options());
    if (y.numel() == 0) return y;
    conv_relu_gap<<<(unsigned)(nb * oc), 256>>>(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                                               y.data_ptr<float>(), ic, h, wd, oc);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "conv relu gap (wrong divisor)"); }
