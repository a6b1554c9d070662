// Conv2d + max pool + ReLU fused. Designed to fail: the conv bias is never added.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// Fully fused: one thread per pooled output computes the 2x2 block of 3x3 convolution outputs under its window
// (stride 1, padding 1), takes the max and applies ReLU (the conv bias is left out); the full-resolution conv output never touches memory.
__global__ void conv_maxpool_relu(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                                  float* __restrict__ y, int nb, int ic, int h, int wd, int oc, int ph, int pw) {
    const int64_t total = (int64_t)nb * oc * ph * pw;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int px = (int)(idx % pw), py = (int)((idx / pw) % ph);
        const int o = (int)((idx / ((int64_t)pw * ph)) % oc), n = (int)(idx / ((int64_t)pw * ph * oc));
        float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
        for (int c = 0; c < ic; ++c) {
            const float* xp = x + ((int64_t)n * ic + c) * h * wd;
            const float* wp = w + ((int64_t)o * ic + c) * 9;
            // the 4x4 input patch feeding the 2x2 conv outputs
            float patch[4][4];
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int iy = 2 * py - 1 + r;
#pragma unroll
                for (int s = 0; s < 4; ++s) {
                    const int ix = 2 * px - 1 + s;
                    patch[r][s] = (iy >= 0 && iy < h && ix >= 0 && ix < wd) ? xp[(int64_t)iy * wd + ix] : 0.0f;
                }
            }
#pragma unroll
            for (int dy = 0; dy < 2; ++dy)
#pragma unroll
                for (int dx = 0; dx < 2; ++dx)
#pragma unroll
                    for (int ky = 0; ky < 3; ++ky)
#pragma unroll
                        for (int kx = 0; kx < 3; ++kx) acc[dy][dx] += patch[dy + ky][dx + kx] * wp[ky * 3 + kx];
        }
        const float m = fmaxf(fmaxf(acc[0][0], acc[0][1]), fmaxf(acc[1][0], acc[1][1]));  // bias dropped: 'max commutes with it'
        y[idx] = fmaxf(m, 0.0f);
    }
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4, "x must be a 4-D CUDA tensor");
    TORCH_CHECK(weight.size(2) == 3 && weight.size(3) == 3, "3x3 filters expected");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int nb = (int)x.size(0), ic = (int)x.size(1), h = (int)x.size(2), wd = (int)x.size(3), oc = (int)weight.size(0);
    const int ph = h / 2, pw = wd / 2;  // conv keeps H x W; 2x2/2 pooling floors
    auto y = torch::empty({nb, oc, ph, pw}, x.options());
    const int64_t total = y.numel();
    if (total == 0) return y;
    conv_maxpool_relu<<<(int)std::min<int64_t>((total + 255) / 256, 1 << 20), 256>>>(x.data_ptr<float>(), weight.data_ptr<float>(),
        bias.data_ptr<float>(), y.data_ptr<float>(), nb, ic, h, wd, oc, ph, pw);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "conv maxpool relu (no bias)"); }
