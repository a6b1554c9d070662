// Fused tiled linear+ReLU with the bias indexed by the batch row instead of the output feature.
// Designed to fail: a realistic broadcasting bug (wrong results wherever batch row != feature).
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

constexpr int TILE = 32;

__global__ void linear_relu_tiled(const float* __restrict__ x, const float* __restrict__ w,
                                  const float* __restrict__ bias, float* __restrict__ y,
                                  int batch, int in_f, int out_f) {
    __shared__ float xs[TILE][TILE];
    __shared__ float ws[TILE][TILE + 1];
    int row = blockIdx.y * TILE + threadIdx.y;   // batch index
    int col = blockIdx.x * TILE + threadIdx.x;   // output feature
    int wrow = blockIdx.x * TILE + threadIdx.y;  // W row this thread stages
    float acc = 0.0f;
    for (int t = 0; t < in_f; t += TILE) {
        xs[threadIdx.y][threadIdx.x] = (row < batch && t + threadIdx.x < in_f) ? x[row * in_f + t + threadIdx.x] : 0.0f;
        ws[threadIdx.y][threadIdx.x] = (wrow < out_f && t + threadIdx.x < in_f) ? w[wrow * in_f + t + threadIdx.x] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += xs[threadIdx.y][k] * ws[threadIdx.x][k];
        __syncthreads();
    }
    if (row < batch && col < out_f) y[row * out_f + col] = fmaxf(acc + bias[row % out_f], 0.0f);
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "inputs must be CUDA tensors");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int batch = static_cast<int>(x.size(0)), in_f = static_cast<int>(x.size(1));
    const int out_f = static_cast<int>(weight.size(0));
    auto y = torch::empty({batch, out_f}, x.options());
    dim3 block(TILE, TILE);
    dim3 grid((out_f + TILE - 1) / TILE, (batch + TILE - 1) / TILE);
    linear_relu_tiled<<<grid, block>>>(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                                       y.data_ptr<float>(), batch, in_f, out_f);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "linear + bias + relu (bias broadcast bug)"); }
