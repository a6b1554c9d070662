// Linear then group norm + hardtanh. Designed to fail: the variance divides by n - 1 (unbiased); over groups of 128 that scales outputs by ~0.4%, beyond the 1e-3 tolerance.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// Fused tail applied to each linear output (idx: flat output index, col: output feature).
__device__ __forceinline__ float epilogue(float v, int64_t idx, int col, const float* __restrict__ p0, const float* __restrict__ p1) {
    (void)idx; (void)col; (void)p0; (void)p1;
    return v;
}

constexpr int TILE = 32;

// y[r][c] = epilogue(x[r] . W[c] + bias[c]) with 32x32 shared-memory tiles of x and W (both read along K, so
// both tile loads are coalesced); the W tile is padded against bank conflicts on its transposed reads.
__global__ void linear_tiled(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                             float* __restrict__ y, int rows, int in_f, int out_f,
                             const float* __restrict__ p0, const float* __restrict__ p1) {
    __shared__ float xs[TILE][TILE];
    __shared__ float ws[TILE][TILE + 1];
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    const int wrow = blockIdx.x * TILE + threadIdx.y;  // W row loaded by this thread
    float acc = 0.0f;
    for (int t = 0; t < in_f; t += TILE) {
        xs[threadIdx.y][threadIdx.x] = (row < rows && t + threadIdx.x < in_f) ? x[(int64_t)row * in_f + t + threadIdx.x] : 0.0f;
        ws[threadIdx.y][threadIdx.x] = (wrow < out_f && t + threadIdx.x < in_f) ? w[(int64_t)wrow * in_f + t + threadIdx.x] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += xs[threadIdx.y][k] * ws[threadIdx.x][k];
        __syncthreads();
    }
    if (row < rows && col < out_f) {
        const int64_t idx = (int64_t)row * out_f + col;
        y[idx] = epilogue(acc + (bias ? bias[col] : 0.0f), idx, col, p0, p1);
    }
}

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

// Group norm over 32 contiguous feature groups of each row, then hardtanh(-2, 2): one warp per (row, group);
// the group's values are read twice (mean, then biased variance of x - mean) and once more for the write.
__global__ void group_norm_hardtanh(const float* __restrict__ y, const float* __restrict__ gamma, const float* __restrict__ beta,
                                    float* __restrict__ out, int64_t row_groups, int groups, int group_size, float eps) {
    const int64_t rg = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (rg >= row_groups) return;
    const int g = (int)(rg % groups);
    const float* src = y + rg * group_size;
    float* dst = out + rg * group_size;
    float s = 0.0f;
    for (int i = lane; i < group_size; i += 32) s += src[i];
    const float mean = warp_sum(s) / (float)group_size;
    float sq = 0.0f;
    for (int i = lane; i < group_size; i += 32) {
        const float d = src[i] - mean;
        sq += d * d;
    }
    const float rstd = rsqrtf(warp_sum(sq) / (float)(group_size - 1)  /* unbiased: torch's group_norm uses the biased variance */ + eps);
    for (int i = lane; i < group_size; i += 32) {
        const int c = g * group_size + i;
        dst[i] = fminf(fmaxf((src[i] - mean) * rstd * gamma[c] + beta[c], -2.0f), 2.0f);
    }
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, torch::Tensor gn_weight, torch::Tensor gn_bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2, "x must be a 2-D CUDA tensor");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    gn_weight = gn_weight.contiguous();
    gn_bias = gn_bias.contiguous();
    const int rows = (int)x.size(0), in_f = (int)x.size(1), out_f = (int)weight.size(0);
    const int groups = 32;
    TORCH_CHECK(out_f % groups == 0, "features must split into 32 groups");
    auto y = torch::empty({rows, out_f}, x.options());
    auto out = torch::empty({rows, out_f}, x.options());
    if (rows == 0) return out;
    dim3 block(TILE, TILE), grid((out_f + TILE - 1) / TILE, (rows + TILE - 1) / TILE);
    linear_tiled<<<grid, block>>>(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), rows, in_f, out_f, nullptr, nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const int64_t row_groups = (int64_t)rows * groups;
    group_norm_hardtanh<<<(unsigned)((row_groups + 7) / 8), 256>>>(y.data_ptr<float>(), gn_weight.data_ptr<float>(),
        gn_bias.data_ptr<float>(), out.data_ptr<float>(), row_groups, groups, out_f / groups, 1e-5f);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "linear groupnorm hardtanh (unbiased var)"); }
