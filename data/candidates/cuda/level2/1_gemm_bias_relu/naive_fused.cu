// One thread per output: dot product of an x row with a W row, then bias and ReLU.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

__global__ void linear_relu_naive(const float* __restrict__ x, const float* __restrict__ w,
                                  const float* __restrict__ bias, float* __restrict__ y,
                                  int batch, int in_f, int out_f) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y;
    if (col >= out_f || row >= batch) return;
    const float* xr = x + (size_t)row * in_f;
    const float* wr = w + (size_t)col * in_f;
    float acc = 0.0f;
    for (int k = 0; k < in_f; ++k) acc += xr[k] * wr[k];
    y[(size_t)row * out_f + col] = fmaxf(acc + bias[col], 0.0f);
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    x = x.contiguous();
    weight = weight.contiguous();
    const int batch = static_cast<int>(x.size(0)), in_f = static_cast<int>(x.size(1));
    const int out_f = static_cast<int>(weight.size(0));
    auto y = torch::empty({batch, out_f}, x.options());
    dim3 grid((out_f + 255) / 256, batch);
    linear_relu_naive<<<grid, 256>>>(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                                     y.data_ptr<float>(), batch, in_f, out_f);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "linear + bias + relu (naive)"); }
