// softmax(Q K^T / sqrt(d)) fused with all keys of the head staged in shared memory. Designed to fail: that needs ~260 KiB of dynamic shared memory, beyond the 48 KiB default (no cudaFuncSetAttribute) and the 227 KiB hardware maximum, so the launch fails.
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

// One block per (batch-head, query row): the query row is staged in shared memory, each warp computes the dot
// products of whole keys (staged in shared memory) (lanes split the head dim, coalesced), scores go to shared memory, then the block
// computes max, sum and the normalised row. Needs seq_len + d floats of shared memory.
__global__ void scores_softmax(const float* __restrict__ q, const float* __restrict__ k, float* __restrict__ out, int seq, int d) {
    extern __shared__ float smem[];
    float* qs = smem;        // [d]
    float* sc = smem + d;    // [seq]
    float* ks = sc + seq;    // [seq * d]: every key of this head, reused by all warps
    __shared__ float red[WARPS];
    const int64_t bh = blockIdx.y;
    const int i = blockIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float* qr = q + (bh * seq + i) * d;
    const float* kb = k + bh * seq * d;
    for (int t = threadIdx.x; t < d; t += blockDim.x) qs[t] = qr[t];
    for (int64_t t = threadIdx.x; t < (int64_t)seq * d; t += blockDim.x) ks[t] = kb[t];
    __syncthreads();
    const float scale = rsqrtf((float)d);
    float m = -INFINITY;
    for (int j = warp; j < seq; j += WARPS) {
        const float* kr = ks + (int64_t)j * d;
        float acc = 0.0f;
        for (int t = lane; t < d; t += 32) acc += qs[t] * kr[t];
        acc = warp_sum(acc) * scale;
        if (lane == 0) sc[j] = acc;
        m = fmaxf(m, acc);
    }
    if (lane == 0) red[warp] = m;
    __syncthreads();
    float gm = red[0];
    for (int w = 1; w < WARPS; ++w) gm = fmaxf(gm, red[w]);
    float s = 0.0f;
    for (int j = threadIdx.x; j < seq; j += blockDim.x) {
        const float e = expf(sc[j] - gm);
        sc[j] = e;  // each j is owned by exactly one thread in this loop
        s += e;
    }
    s = warp_sum(s);
    __syncthreads();  // all threads have read red[] (the maxima) before it is overwritten with sums
    if (lane == 0) red[warp] = s;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < WARPS; ++w) total += red[w];
    const float inv = 1.0f / total;
    float* orow = out + (bh * seq + i) * seq;
    for (int j = threadIdx.x; j < seq; j += blockDim.x) orow[j] = sc[j] * inv;
}

torch::Tensor forward(torch::Tensor q, torch::Tensor k) {
    TORCH_CHECK(q.is_cuda() && q.dim() == 3 && q.sizes() == k.sizes(), "q and k must be matching 3-D CUDA tensors");
    q = q.contiguous();
    k = k.contiguous();
    const int bh = (int)q.size(0), seq = (int)q.size(1), d = (int)q.size(2);
    auto out = torch::empty({bh, seq, seq}, q.options());
    if (out.numel() == 0) return out;
    // q row, score row and the head's keys: 1024 * 64 floats of keys alone is 256 KiB
    const size_t smem = (size_t)(seq + d + (size_t)seq * d) * sizeof(float);
    scores_softmax<<<dim3((unsigned)seq, (unsigned)bh), WARPS * 32, smem>>>(q.data_ptr<float>(), k.data_ptr<float>(), out.data_ptr<float>(), seq, d);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "scores softmax (too much shared memory)"); }
