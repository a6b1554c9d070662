// Conv1d + bias + GELU. Designed to fail: the padding is 3 (copied from a kernel-7 conv) instead of 2, so the output is two samples longer and shifted.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// Conv1d (stride 1, padding 2, kernel 5) + bias + exact GELU: one thread per output.
__global__ void conv1d_direct(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                              float* __restrict__ y, int nb, int ic, int len, int oc, int k, int pad, int out_len) {
    const int64_t total = (int64_t)nb * oc * out_len;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int l = (int)(idx % out_len);
        const int o = (int)((idx / out_len) % oc);
        const int n = (int)(idx / ((int64_t)out_len * oc));
        float acc = bias[o];
        for (int c = 0; c < ic; ++c) {
            const float* xp = x + ((int64_t)n * ic + c) * len;
            const float* wp = w + ((int64_t)o * ic + c) * k;
            for (int t = 0; t < k; ++t) {
                const int i = l - pad + t;
                if (i >= 0 && i < len) acc += xp[i] * wp[t];
            }
        }
        y[idx] = 0.5f * acc * (1.0f + erff(acc * 0.70710678118654752f));
    }
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 3, "x must be a 3-D CUDA tensor");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int nb = (int)x.size(0), ic = (int)x.size(1), len = (int)x.size(2);
    const int oc = (int)weight.size(0), k = (int)weight.size(2);
    const int pad = 3, out_len = len + 2 * pad - k + 1;
    auto y = torch::empty({nb, oc, out_len}, x.options());
    const int64_t total = y.numel();
    if (total == 0) return y;
    conv1d_direct<<<(int)std::min<int64_t>((total + 255) / 256, 1 << 20), 256>>>(
        x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), nb, ic, len, oc, k, pad, out_len);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "conv1d gelu (wrong padding)"); }
