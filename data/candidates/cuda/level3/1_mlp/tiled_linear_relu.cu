// 3-layer MLP: three launches of a 32x32 shared-memory tiled linear kernel with fused bias + ReLU.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// Activation codes shared by the kernels of this file.
constexpr int ACT_NONE = 0, ACT_RELU = 1, ACT_GELU = 2, ACT_GELU_TANH = 3;

__device__ __forceinline__ float activate(float v, int act) {
    switch (act) {
        case ACT_RELU: return fmaxf(v, 0.0f);
        case ACT_GELU: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
        case ACT_GELU_TANH: return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
        default: return v;
    }
}

constexpr int TILE = 32;

// y = act(x @ W.T + b) (+ res), x [rows, in_f], W [out_f, in_f], res [rows, out_f] or null; 32x32 shared-memory tiles.
__global__ void linear_act(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                           const float* __restrict__ res, float* __restrict__ y, int rows, int in_f, int out_f, int act) {
    __shared__ float xs[TILE][TILE];
    __shared__ float ws[TILE][TILE + 1];
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    const int wrow = blockIdx.x * TILE + threadIdx.y;
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
        float v = activate(acc + (b ? b[col] : 0.0f), act);
        if (res) v += res[idx];
        y[idx] = v;
    }
}

static void launch_linear(const torch::Tensor& x, const torch::Tensor& w, const float* b, const float* res, torch::Tensor& y, int act) {
    const int rows = (int)(x.numel() / x.size(-1)), in_f = (int)x.size(-1), out_f = (int)w.size(0);
    dim3 block(TILE, TILE), grid((out_f + TILE - 1) / TILE, (rows + TILE - 1) / TILE);
    linear_act<<<grid, block>>>(x.data_ptr<float>(), w.data_ptr<float>(), b, res, y.data_ptr<float>(), rows, in_f, out_f, act);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

torch::Tensor forward(torch::Tensor x, torch::Tensor fc1_weight, torch::Tensor fc1_bias, torch::Tensor fc2_weight, torch::Tensor fc2_bias, torch::Tensor fc3_weight, torch::Tensor fc3_bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2, "x must be a 2-D CUDA tensor");
    x = x.contiguous();
    fc1_weight = fc1_weight.contiguous(); fc2_weight = fc2_weight.contiguous(); fc3_weight = fc3_weight.contiguous();
    fc1_bias = fc1_bias.contiguous(); fc2_bias = fc2_bias.contiguous(); fc3_bias = fc3_bias.contiguous();
    const int64_t rows = x.size(0);
    auto h1 = torch::empty({rows, fc1_weight.size(0)}, x.options());
    auto h2 = torch::empty({rows, fc2_weight.size(0)}, x.options());
    auto y = torch::empty({rows, fc3_weight.size(0)}, x.options());
    if (rows == 0) return y;
    launch_linear(x, fc1_weight, fc1_bias.data_ptr<float>(), nullptr, h1, ACT_RELU);
    launch_linear(h1, fc2_weight, fc2_bias.data_ptr<float>(), nullptr, h2, ACT_RELU);
    launch_linear(h2, fc3_weight, fc3_bias.data_ptr<float>(), nullptr, y, ACT_NONE);
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "mlp (tiled linear)"); }
