// VGG stack with the max pools fused into the second and fourth convolutions (4x4 patch per pooled output).
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// 3x3 conv (stride 1, pad 1, weight [OC, IC, 3, 3]) with a per-channel affine epilogue:
// y = relu?(acc * scale[o] + shift[o] (+ res[idx])). scale may be null (then 1), shift may be null (then 0).
__global__ void conv3x3_affine(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ scale,
                               const float* __restrict__ shift, const float* __restrict__ res, float* __restrict__ y,
                               int nb, int ic, int h, int wd, int oc, int relu) {
    const int64_t hw = (int64_t)h * wd;
    const int64_t total = (int64_t)nb * oc * hw;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int ox = (int)(idx % wd), oy = (int)((idx / wd) % h);
        const int o = (int)((idx / hw) % oc), n = (int)(idx / (hw * oc));
        float acc = 0.0f;
        for (int c = 0; c < ic; ++c) {
            const float* xp = x + ((int64_t)n * ic + c) * hw;
            const float* wp = w + ((int64_t)o * ic + c) * 9;
#pragma unroll
            for (int ky = 0; ky < 3; ++ky) {
                const int iy = oy - 1 + ky;
                if (iy < 0 || iy >= h) continue;
#pragma unroll
                for (int kx = 0; kx < 3; ++kx) {
                    const int ix = ox - 1 + kx;
                    if (ix >= 0 && ix < wd) acc += xp[(int64_t)iy * wd + ix] * wp[ky * 3 + kx];
                }
            }
        }
        float v = acc * (scale ? scale[o] : 1.0f) + (shift ? shift[o] : 0.0f);
        if (res) v += res[idx];
        y[idx] = relu ? fmaxf(v, 0.0f) : v;
    }
}

static void launch_conv3x3(const torch::Tensor& x, const torch::Tensor& w, const float* scale, const float* shift,
                           const float* res, torch::Tensor& y, bool relu) {
    const int64_t total = y.numel();
    if (total == 0) return;
    conv3x3_affine<<<(int)std::min<int64_t>((total + 255) / 256, 1 << 20), 256>>>(x.data_ptr<float>(), w.data_ptr<float>(),
        scale, shift, res, y.data_ptr<float>(), (int)x.size(0), (int)x.size(1), (int)x.size(2), (int)x.size(3), (int)w.size(0), relu ? 1 : 0);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// conv + bias + ReLU + 2x2 max pool fused: one thread per pooled output computes its four conv outputs.
__global__ void conv3x3_relu_pool(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                                  float* __restrict__ y, int nb, int ic, int h, int wd, int oc) {
    const int ph = h / 2, pw = wd / 2;
    const int64_t total = (int64_t)nb * oc * ph * pw;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int px = (int)(idx % pw), py = (int)((idx / pw) % ph);
        const int o = (int)((idx / ((int64_t)pw * ph)) % oc), n = (int)(idx / ((int64_t)pw * ph * oc));
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int c = 0; c < ic; ++c) {
            const float* xp = x + ((int64_t)n * ic + c) * h * wd;
            const float* wp = w + ((int64_t)o * ic + c) * 9;
            float patch[4][4];
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int s = 0; s < 4; ++s) {
                    const int iy = 2 * py - 1 + r, ix = 2 * px - 1 + s;
                    patch[r][s] = (iy >= 0 && iy < h && ix >= 0 && ix < wd) ? xp[(int64_t)iy * wd + ix] : 0.0f;
                }
#pragma unroll
            for (int q = 0; q < 4; ++q)
#pragma unroll
                for (int ky = 0; ky < 3; ++ky)
#pragma unroll
                    for (int kx = 0; kx < 3; ++kx) acc[q] += patch[(q >> 1) + ky][(q & 1) + kx] * wp[ky * 3 + kx];
        }
        // relu(max(a) + b) == max(relu(a + b)): bias and ReLU are monotone
        y[idx] = fmaxf(fmaxf(fmaxf(acc[0], acc[1]), fmaxf(acc[2], acc[3])) + b[o], 0.0f);
    }
}

static torch::Tensor launch_conv_bias_relu(const torch::Tensor& x, torch::Tensor w, torch::Tensor b) {
    w = w.contiguous();
    b = b.contiguous();
    auto y = torch::empty({x.size(0), w.size(0), x.size(2), x.size(3)}, x.options());
    launch_conv3x3(x, w, nullptr, b.data_ptr<float>(), nullptr, y, true);
    return y;
}

static torch::Tensor launch_conv_bias_relu_pool(const torch::Tensor& x, torch::Tensor w, torch::Tensor b) {
    w = w.contiguous();
    b = b.contiguous();
    const int nb = (int)x.size(0), ic = (int)x.size(1), h = (int)x.size(2), wd = (int)x.size(3), oc = (int)w.size(0);
    auto y = torch::empty({nb, oc, h / 2, wd / 2}, x.options());
    const int64_t total = y.numel();
    if (total == 0) return y;
    conv3x3_relu_pool<<<(int)std::min<int64_t>((total + 127) / 128, 1 << 20), 128>>>(x.data_ptr<float>(), w.data_ptr<float>(),
        b.data_ptr<float>(), y.data_ptr<float>(), nb, ic, h, wd, oc);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

torch::Tensor forward(torch::Tensor x, torch::Tensor conv1_weight, torch::Tensor conv1_bias, torch::Tensor conv2_weight, torch::Tensor conv2_bias, torch::Tensor conv3_weight, torch::Tensor conv3_bias, torch::Tensor conv4_weight, torch::Tensor conv4_bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4, "x must be a 4-D CUDA tensor");
    x = x.contiguous();
    auto y = launch_conv_bias_relu(x, conv1_weight, conv1_bias);
    y = launch_conv_bias_relu_pool(y, conv2_weight, conv2_bias);
    y = launch_conv_bias_relu(y, conv3_weight, conv3_bias);
    return launch_conv_bias_relu_pool(y, conv4_weight, conv4_bias);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "vgg stack (pool fused)"); }
