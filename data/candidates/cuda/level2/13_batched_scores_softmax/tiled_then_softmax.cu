// softmax(Q K^T / sqrt(d)): batched tiled score GEMM into the output, then an in-place row softmax on it.
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

constexpr int TILE = 32;

// Q K^T / sqrt(d) for all heads with 32x32 shared-memory tiles (K is read along d for both operands), written to
// the output buffer, followed by an in-place row softmax over that same buffer (our own allocation, not an input).
__global__ void scores_tiled(const float* __restrict__ q, const float* __restrict__ k, float* __restrict__ s, int seq, int d, float scale) {
    __shared__ float qs[TILE][TILE];
    __shared__ float ks[TILE][TILE + 1];
    const int64_t bh = blockIdx.z;
    const float* qb = q + bh * seq * d;
    const float* kb = k + bh * seq * d;
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    const int krow = blockIdx.x * TILE + threadIdx.y;
    float acc = 0.0f;
    for (int t = 0; t < d; t += TILE) {
        qs[threadIdx.y][threadIdx.x] = (row < seq && t + threadIdx.x < d) ? qb[(int64_t)row * d + t + threadIdx.x] : 0.0f;
        ks[threadIdx.y][threadIdx.x] = (krow < seq && t + threadIdx.x < d) ? kb[(int64_t)krow * d + t + threadIdx.x] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) acc += qs[threadIdx.y][kk] * ks[threadIdx.x][kk];
        __syncthreads();
    }
    if (row < seq && col < seq) s[(bh * seq + row) * seq + col] = acc * scale;
}

__global__ void softmax_rows_in_place(float* __restrict__ s, int cols) {
    __shared__ float scratch[32];
    float* r = s + (int64_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, r[c]);
    m = block_max(m, scratch);
    float sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(r[c] - m);
    const float inv = 1.0f / block_sum(sum, scratch);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) r[c] = expf(r[c] - m) * inv;
}

torch::Tensor forward(torch::Tensor q, torch::Tensor k) {
    TORCH_CHECK(q.is_cuda() && q.dim() == 3 && q.sizes() == k.sizes(), "q and k must be matching 3-D CUDA tensors");
    q = q.contiguous();
    k = k.contiguous();
    const int bh = (int)q.size(0), seq = (int)q.size(1), d = (int)q.size(2);
    auto out = torch::empty({bh, seq, seq}, q.options());
    if (out.numel() == 0) return out;
    TORCH_CHECK(bh <= 65535, "too many heads for grid.z");
    dim3 block(TILE, TILE), grid((seq + TILE - 1) / TILE, (seq + TILE - 1) / TILE, bh);
    scores_tiled<<<grid, block>>>(q.data_ptr<float>(), k.data_ptr<float>(), out.data_ptr<float>(), seq, d, 1.0f / sqrtf((float)d));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    softmax_rows_in_place<<<(unsigned)((int64_t)bh * seq), 256>>>(out.data_ptr<float>(), seq);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "scores softmax (two kernels)"); }
