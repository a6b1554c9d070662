// ConvTranspose1d in scatter form with atomicAdd. Designed to fail: the output (torch::empty) is never zeroed before the atomics.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// ConvTranspose1d in scatter form: one thread per (n, input channel, input position) adds x * w into every output it
// touches with atomicAdd. Designed to fail: the output comes from torch::empty and is never zeroed (nor seeded with
// the bias), so the contributions land on whatever the allocation held (uninitialized_output).
__global__ void conv_transpose1d_scatter(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                                         int nb, int ic, int len, int oc, int k, int s, int p, int out_len) {
    const int64_t total = (int64_t)nb * ic * len;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total) return;
    const int i = (int)(idx % len);
    const int c = (int)((idx / len) % ic);
    const int n = (int)(idx / ((int64_t)len * ic));
    const float v = x[idx];
    for (int f = 0; f < oc; ++f)
        for (int t = 0; t < k; ++t) {
            const int o = i * s - p + t;
            if (o >= 0 && o < out_len) atomicAdd(&y[((int64_t)n * oc + f) * out_len + o], v * w[((int64_t)c * oc + f) * k + t]);
        }
}

__global__ void add_bias(float* __restrict__ y, const float* __restrict__ bias, int oc, int out_len, int64_t total) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < total) y[idx] += bias[(idx / out_len) % oc];
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    x = x.contiguous();
    weight = weight.contiguous();
    const int nb = (int)x.size(0), ic = (int)x.size(1), len = (int)x.size(2);
    const int oc = (int)weight.size(1), k = (int)weight.size(2);
    const int s = 2, p = 1, out_len = (len - 1) * s - 2 * p + k;
    auto y = torch::empty({nb, oc, out_len}, x.options());
    const int64_t in_total = x.numel(), out_total = y.numel();
    conv_transpose1d_scatter<<<(unsigned)((in_total + 255) / 256), 256>>>(x.data_ptr<float>(), weight.data_ptr<float>(),
        y.data_ptr<float>(), nb, ic, len, oc, k, s, p, out_len);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    add_bias<<<(unsigned)((out_total + 255) / 256), 256>>>(y.data_ptr<float>(), bias.data_ptr<float>(), oc, out_len, out_total);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "conv_transpose1d (scatter into empty)"); }
