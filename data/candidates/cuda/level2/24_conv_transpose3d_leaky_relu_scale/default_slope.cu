// ConvTranspose3d + leaky ReLU + scale. Designed to fail: uses the default negative slope 0.01 instead of the task's 0.2.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// ConvTranspose3d (stride 2, padding 1, output_padding 1, kernel 3; weight [IC, OC, K, K, K]) in gather form.
// Output extent per axis: (in - 1) * s - 2p + k + output_padding.
__global__ void conv_transpose3d_gather(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                                        float* __restrict__ y, const float* __restrict__ scale, int nb, int ic, int id, int ih, int iw, int oc, int k, int s, int p,
                                        int od, int oh, int ow) {
    const int64_t total = (int64_t)nb * oc * od * oh * ow;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t in_plane = (int64_t)id * ih * iw;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int ox = (int)(idx % ow), oy = (int)((idx / ow) % oh), oz = (int)((idx / ((int64_t)ow * oh)) % od);
        const int64_t nf = idx / ((int64_t)ow * oh * od);
        const int f = (int)(nf % oc), n = (int)(nf / oc);
        float acc = bias[f];
        for (int tz = (oz + p) % s; tz < k; tz += s) {
            const int iz = (oz + p - tz) / s;
            if (iz < 0 || iz >= id) continue;
            for (int ty = (oy + p) % s; ty < k; ty += s) {
                const int iy = (oy + p - ty) / s;
                if (iy < 0 || iy >= ih) continue;
                for (int tx = (ox + p) % s; tx < k; tx += s) {
                    const int ix = (ox + p - tx) / s;
                    if (ix < 0 || ix >= iw) continue;
                    const float* xp = x + (int64_t)n * ic * in_plane + ((int64_t)iz * ih + iy) * iw + ix;
                    const float* wp = w + (int64_t)f * k * k * k + (tz * k + ty) * k + tx;
                    for (int c = 0; c < ic; ++c) acc += xp[c * in_plane] * wp[(int64_t)c * oc * k * k * k];
                }
            }
        }
        const float v = acc > 0.0f ? acc : 0.01f * acc;
        y[idx] = v * scale[f];
    }
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, torch::Tensor channel_scale) {
    channel_scale = channel_scale.contiguous();
    TORCH_CHECK(x.is_cuda() && x.dim() == 5, "x must be a 5-D CUDA tensor");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int nb = (int)x.size(0), ic = (int)x.size(1), id = (int)x.size(2), ih = (int)x.size(3), iw = (int)x.size(4);
    const int oc = (int)weight.size(1), k = (int)weight.size(2);
    const int s = 2, p = 1, op = 1;
    const int od = (id - 1) * s - 2 * p + k + op, oh = (ih - 1) * s - 2 * p + k + op, ow = (iw - 1) * s - 2 * p + k + op;
    auto y = torch::empty({nb, oc, od, oh, ow}, x.options());
    const int64_t total = y.numel();
    if (total == 0) return y;
    conv_transpose3d_gather<<<(int)std::min<int64_t>((total + 255) / 256, 1 << 20), 256>>>(x.data_ptr<float>(),
        weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), channel_scale.data_ptr<float>(), nb, ic, id, ih, iw, oc, k, s, p, od, oh, ow);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "conv_transpose3d leaky scale (wrong slope)"); }
