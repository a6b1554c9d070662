// (x @ W.T + b) * 0.5 + residual. Designed to fail: the residual is indexed by the output column only, as if it were a per-feature vector, so every row adds row 0 of the residual.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// Fused tail applied to each linear output (idx: flat output index, col: output feature).
__device__ __forceinline__ float epilogue(float v, int64_t idx, int col, const float* __restrict__ p0, const float* __restrict__ p1) {
    (void)idx; (void)col; (void)p0; (void)p1;
    return v * 0.5f + p0[col];
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

torch::Tensor forward(torch::Tensor x, torch::Tensor residual, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2, "x must be a 2-D CUDA tensor");
    x = x.contiguous();
    weight = weight.contiguous();
    residual = residual.contiguous();
    const int rows = (int)x.size(0), in_f = (int)x.size(1), out_f = (int)weight.size(0);
    TORCH_CHECK(weight.size(1) == in_f, "weight/input feature mismatch");
    auto y = torch::empty({rows, out_f}, x.options());
    if (y.numel() == 0) return y;
    dim3 block(TILE, TILE), grid((out_f + TILE - 1) / TILE, (rows + TILE - 1) / TILE);
    linear_tiled<<<grid, block>>>(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), rows, in_f, out_f, residual.data_ptr<float>(), nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "linear scale residual (wrong broadcast)"); }
