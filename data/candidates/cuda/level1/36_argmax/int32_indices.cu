// argmax over dim 1. Designed to fail: it returns int32 indices where torch.argmax returns int64 (dtype mismatch).
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// One thread per output column: first index of the maximum along dim 1 (strict '>' keeps the first, as torch does).
__global__ void argmax_middle(const float* __restrict__ x, int* __restrict__ y, int64_t d1, int64_t d2) {
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t n = blockIdx.y;
    if (j >= d2) return;
    const float* base = x + n * d1 * d2 + j;
    float best = -INFINITY;
    int64_t best_i = 0;
    for (int64_t i = 0; i < d1; ++i) {
        const float v = base[i * d2];
        if (v > best) {
            best = v;
            best_i = i;
        }
    }
    y[n * d2 + j] = (int)best_i;
}

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 3, "x must be a 3-D CUDA tensor");
    x = x.contiguous();
    const int64_t b = x.size(0), d1 = x.size(1), d2 = x.size(2);
    auto y = torch::empty({b, d2}, x.options().dtype(torch::kInt32));
    if (y.numel() == 0) return y;
    dim3 grid((unsigned)((d2 + 255) / 256), (unsigned)b);
    argmax_middle<<<grid, 256>>>(x.data_ptr<float>(), y.data_ptr<int>(), d1, d2);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "argmax (int32 output)"); }
