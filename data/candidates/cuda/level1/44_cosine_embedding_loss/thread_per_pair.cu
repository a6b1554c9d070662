// Cosine embedding loss, one thread per pair (naive).
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// One thread per pair: dot product and squared norms over the 256 features in one loop.
__global__ void cosine_loss_naive(const float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ labels,
                                  float* __restrict__ out, int64_t rows, int64_t cols, float margin) {
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* ar = a + r * cols;
    const float* br = b + r * cols;
    float dot = 0.0f, na = 0.0f, nb = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
        dot += ar[c] * br[c];
        na += ar[c] * ar[c];
        nb += br[c] * br[c];
    }
    // PyTorch adds 1e-12 to each squared norm before the square root.
    const float cosv = dot / sqrtf((na + 1e-12f) * (nb + 1e-12f));
    out[r] = labels[r] > 0.0f ? 1.0f - cosv : fmaxf(0.0f, cosv - margin);
}

torch::Tensor forward(torch::Tensor x1, torch::Tensor x2, torch::Tensor labels) {
    TORCH_CHECK(x1.is_cuda() && x1.sizes() == x2.sizes(), "matching CUDA tensors expected");
    x1 = x1.contiguous();
    x2 = x2.contiguous();
    labels = labels.contiguous();
    const int64_t rows = x1.size(0), cols = x1.size(1);
    auto out = torch::empty({rows}, x1.options());
    if (rows == 0) return out;
    cosine_loss_naive<<<(unsigned)((rows + 127) / 128), 128>>>(x1.data_ptr<float>(), x2.data_ptr<float>(), labels.data_ptr<float>(), out.data_ptr<float>(), rows, cols, 0.5f);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "cosine embedding loss (naive)"); }
