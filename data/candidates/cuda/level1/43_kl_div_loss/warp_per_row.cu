// Per-row KL divergence from logits, one warp per row.
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

// One warp per row: three passes (max, sum of exp, KL terms) with xor-shuffle reductions; rows are re-read
// from L1/L2 rather than staged, which keeps any row length valid.

__global__ void kl_warp(const float* __restrict__ pred, const float* __restrict__ target, float* __restrict__ out,
                        int64_t rows, int64_t cols) {
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float* pr = pred + row * cols;
    const float* tr = target + row * cols;
    float mp = -INFINITY, mq = -INFINITY;
    for (int64_t c = lane; c < cols; c += 32) {
        mp = fmaxf(mp, pr[c]);
        mq = fmaxf(mq, tr[c]);
    }
    mp = warp_max(mp);
    mq = warp_max(mq);
    float sp = 0.0f, sq = 0.0f;
    for (int64_t c = lane; c < cols; c += 32) {
        sp += expf(pr[c] - mp);
        sq += expf(tr[c] - mq);
    }
    const float lse_p = mp + logf(warp_sum(sp));
    const float lse_q = mq + logf(warp_sum(sq));
    float acc = 0.0f;
    for (int64_t c = lane; c < cols; c += 32) {
        const float log_p = pr[c] - lse_p, log_q = tr[c] - lse_q;
        acc += expf(log_q) * (log_q - log_p);
    }
    acc = warp_sum(acc);
    if (lane == 0) out[row] = acc;
}

torch::Tensor forward(torch::Tensor prediction_logits, torch::Tensor target_logits) {
    TORCH_CHECK(prediction_logits.is_cuda() && prediction_logits.sizes() == target_logits.sizes(), "matching CUDA tensors expected");
    prediction_logits = prediction_logits.contiguous();
    target_logits = target_logits.contiguous();
    const int64_t rows = prediction_logits.size(0), cols = prediction_logits.size(1);
    auto out = torch::empty({rows}, prediction_logits.options());
    if (rows == 0) return out;
    constexpr int warps_per_block = 8;
    kl_warp<<<(unsigned)((rows + warps_per_block - 1) / warps_per_block), warps_per_block * 32>>>(
        prediction_logits.data_ptr<float>(), target_logits.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "kl div (warp per row)"); }
