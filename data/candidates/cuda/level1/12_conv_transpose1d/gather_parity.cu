// ConvTranspose1d, gather form visiting only the taps of the output's stride phase.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// ConvTranspose1d (stride S, padding P, kernel K; weight [IC, OC, K]) in gather form: each output position o sums
// x[i] * w[c][oc][t] over the taps t with o + P - t = i * S for a valid input position i.
__global__ void conv_transpose1d_gather(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                                        float* __restrict__ y, int nb, int ic, int len, int oc, int k, int s, int p, int out_len) {
    const int64_t total = (int64_t)nb * oc * out_len;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int o = (int)(idx % out_len);
        const int f = (int)((idx / out_len) % oc);
        const int n = (int)(idx / ((int64_t)out_len * oc));
        float acc = bias[f];
        // Only taps with (o + p - t) divisible by s contribute: start at the first such t and step by s.
        const int t0 = (o + p) % s;
        for (int t = t0; t < k; t += s) {
            const int i = (o + p - t) / s;
            if (i < 0 || i >= len) continue;
            for (int c = 0; c < ic; ++c) acc += x[((int64_t)n * ic + c) * len + i] * w[((int64_t)c * oc + f) * k + t];
        }
        y[idx] = acc;
    }
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 3, "x must be a 3-D CUDA tensor");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int nb = (int)x.size(0), ic = (int)x.size(1), len = (int)x.size(2);
    const int oc = (int)weight.size(1), k = (int)weight.size(2);
    const int s = 2, p = 1;
    const int out_len = (len - 1) * s - 2 * p + k;
    auto y = torch::empty({nb, oc, out_len}, x.options());
    const int64_t total = y.numel();
    if (total == 0) return y;
    conv_transpose1d_gather<<<(int)std::min<int64_t>((total + 255) / 256, 1 << 20), 256>>>(
        x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), nb, ic, len, oc, k, s, p, out_len);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "conv_transpose1d (phase gather)"); }
