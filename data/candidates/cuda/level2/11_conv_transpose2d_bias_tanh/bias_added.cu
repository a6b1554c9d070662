// ConvTranspose2d + tanh(y - channel_bias). Designed to fail: the channel bias is added instead of subtracted.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// ConvTranspose2d (stride 2, padding 1, kernel 4; weight [IC, OC, K, K]) in gather form: for each output pixel only
// the taps of its stride phase contribute ((o + p - t) divisible by s), K/S = 2 per axis.
__global__ void conv_transpose2d_gather(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                                        float* __restrict__ y, int nb, int ic, int ih, int iw, int oc, int k, int s, int p,
                                        int oh, int ow) {
    const int64_t total = (int64_t)nb * oc * oh * ow;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int ox = (int)(idx % ow), oy = (int)((idx / ow) % oh);
        const int f = (int)((idx / ((int64_t)ow * oh)) % oc), n = (int)(idx / ((int64_t)ow * oh * oc));
        float acc = 0.0f;
        for (int t_y = (oy + p) % s; t_y < k; t_y += s) {
            const int iy = (oy + p - t_y) / s;
            if (iy < 0 || iy >= ih) continue;
            for (int t_x = (ox + p) % s; t_x < k; t_x += s) {
                const int ix = (ox + p - t_x) / s;
                if (ix < 0 || ix >= iw) continue;
                for (int c = 0; c < ic; ++c)
                    acc += x[(((int64_t)n * ic + c) * ih + iy) * iw + ix] * w[((int64_t)c * oc + f) * k * k + t_y * k + t_x];
            }
        }
        y[idx] = tanhf(acc + bias[f]);
    }
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias /* channel_bias */) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4, "x must be a 4-D CUDA tensor");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int nb = (int)x.size(0), ic = (int)x.size(1), ih = (int)x.size(2), iw = (int)x.size(3);
    const int oc = (int)weight.size(1), k = (int)weight.size(2);
    const int s = 2, p = 1;
    const int oh = (ih - 1) * s - 2 * p + k, ow = (iw - 1) * s - 2 * p + k;
    auto y = torch::empty({nb, oc, oh, ow}, x.options());
    const int64_t total = y.numel();
    if (total == 0) return y;
    conv_transpose2d_gather<<<(int)std::min<int64_t>((total + 255) / 256, 1 << 20), 256>>>(x.data_ptr<float>(),
        weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), nb, ic, ih, iw, oc, k, s, p, oh, ow);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "conv_transpose2d bias tanh (sign)"); }
