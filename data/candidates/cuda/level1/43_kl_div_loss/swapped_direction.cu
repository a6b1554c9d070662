// Per-row KL divergence. Designed to fail: it computes KL(prediction || target), swapping the roles of the two distributions (F.kl_div(log_p, log_q, log_target=True) weights by the target).
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

// One block per row: log-sum-exp of both logit rows, then sum_c exp(log_q) * (log_q - log_p)
// where log_p / log_q are the log-softmaxes of the prediction / target logits.
__global__ void kl_rows(const float* __restrict__ pred, const float* __restrict__ target, float* __restrict__ out,
                        int64_t cols) {
    __shared__ float scratch[32];
    const float* pr = pred + (size_t)blockIdx.x * cols;
    const float* tr = target + (size_t)blockIdx.x * cols;
    float mp = -INFINITY, mq = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        mp = fmaxf(mp, pr[c]);
        mq = fmaxf(mq, tr[c]);
    }
    mp = block_max(mp, scratch);
    mq = block_max(mq, scratch);
    float sp = 0.0f, sq = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        sp += expf(pr[c] - mp);
        sq += expf(tr[c] - mq);
    }
    const float lse_p = mp + logf(block_sum(sp, scratch));
    const float lse_q = mq + logf(block_sum(sq, scratch));
    float acc = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float log_p = pr[c] - lse_p, log_q = tr[c] - lse_q;
        acc += expf(log_p) * (log_p - log_q);
    }
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) out[blockIdx.x] = acc;
}

torch::Tensor forward(torch::Tensor prediction_logits, torch::Tensor target_logits) {
    TORCH_CHECK(prediction_logits.is_cuda() && prediction_logits.sizes() == target_logits.sizes(), "matching CUDA tensors expected");
    prediction_logits = prediction_logits.contiguous();
    target_logits = target_logits.contiguous();
    const int64_t rows = prediction_logits.size(0), cols = prediction_logits.size(1);
    auto out = torch::empty({rows}, prediction_logits.options());
    if (rows == 0) return out;
    kl_rows<<<(unsigned)rows, 256>>>(prediction_logits.data_ptr<float>(), target_logits.data_ptr<float>(), out.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "kl div (swapped)"); }
