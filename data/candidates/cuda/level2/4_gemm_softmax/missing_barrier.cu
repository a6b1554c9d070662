// Linear + softmax fused. Designed to fail: no __syncthreads between the warps writing their logits and maxima to shared memory and every thread reading all of them (race: stale logits and maxima are used).
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

constexpr int WARPS = 8;

// One block per row of x. The row is staged in shared memory; each warp computes whole output features (lanes
// split K, so W rows are read coalesced) and folds them into a per-warp running state, merged across warps at the end.
__global__ void linear_row_fused(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                                 float* __restrict__ out, int in_f, int out_f) {
    extern __shared__ float smem[];
    float* xs = smem;  // [in_f]
    float* logits = smem + in_f;  // [out_f]
    __shared__ float warp_a[WARPS], warp_b[WARPS];
    const int row = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float* xr = x + (int64_t)row * in_f;
    for (int k = threadIdx.x; k < in_f; k += blockDim.x) xs[k] = xr[k];
    __syncthreads();
    float m = -INFINITY;
    for (int c = warp; c < out_f; c += WARPS) {
        const float* wr = w + (int64_t)c * in_f;
        float acc = 0.0f;
        for (int k = lane; k < in_f; k += 32) acc += xs[k] * wr[k];
        const float v = warp_sum(acc) + bias[c];  // xor shuffles: every lane holds the total
        if (lane == 0) logits[c] = v;
        m = fmaxf(m, v);
    }
    if (lane == 0) warp_a[warp] = m;
    // (no barrier: other warps' logits and maxima may not be written yet)
    float gm = warp_a[0];
    for (int i = 1; i < WARPS; ++i) gm = fmaxf(gm, warp_a[i]);
    float s = 0.0f;
    for (int c = threadIdx.x; c < out_f; c += blockDim.x) s += expf(logits[c] - gm);
    s = warp_sum(s);
    if (lane == 0) warp_b[warp] = s;
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < WARPS; ++i) total += warp_b[i];
    const float inv = 1.0f / total;
    for (int c = threadIdx.x; c < out_f; c += blockDim.x) out[(int64_t)row * out_f + c] = expf(logits[c] - gm) * inv;
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2, "x must be a 2-D CUDA tensor");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int rows = (int)x.size(0), in_f = (int)x.size(1), out_f = (int)weight.size(0);
    auto out = torch::empty({rows, out_f}, x.options());
    if (rows == 0) return out;
    const size_t smem = (size_t)(in_f + out_f) * sizeof(float);
    TORCH_CHECK(smem <= 48 * 1024, "row does not fit the default shared memory");
    linear_row_fused<<<rows, WARPS * 32, smem>>>(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                                                out.data_ptr<float>(), in_f, out_f);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "linear + softmax (race)"); }
