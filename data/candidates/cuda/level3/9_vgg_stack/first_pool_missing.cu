// VGG stack. Designed to fail: the max pool after the second convolution was dropped, so the output keeps twice the spatial size (shape mismatch).
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

// 2x2 / stride-2 max pool, one thread per output.
__global__ void maxpool2(const float* __restrict__ x, float* __restrict__ y, int h, int wd, int ph, int pw, int64_t total) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int px = (int)(idx % pw), py = (int)((idx / pw) % ph);
        const float* p = x + (idx / ((int64_t)pw * ph)) * h * wd + (int64_t)(2 * py) * wd + 2 * px;
        y[idx] = fmaxf(fmaxf(p[0], p[1]), fmaxf(p[wd], p[wd + 1]));
    }
}

static torch::Tensor launch_max_pool_2x2(const torch::Tensor& x) {
    const int h = (int)x.size(2), wd = (int)x.size(3);
    auto y = torch::empty({x.size(0), x.size(1), h / 2, wd / 2}, x.options());
    const int64_t total = y.numel();
    if (total == 0) return y;
    maxpool2<<<(int)std::min<int64_t>((total + 255) / 256, 1 << 20), 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), h, wd, h / 2, wd / 2, total);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

// conv+bias+ReLU with the bias as the affine shift (scale null = 1) of the shared 3x3 conv kernel.
static torch::Tensor launch_conv_bias_relu(const torch::Tensor& x, torch::Tensor w, torch::Tensor b) {
    w = w.contiguous();
    b = b.contiguous();
    auto y = torch::empty({x.size(0), w.size(0), x.size(2), x.size(3)}, x.options());
    launch_conv3x3(x, w, nullptr, b.data_ptr<float>(), nullptr, y, true);
    return y;
}

torch::Tensor forward(torch::Tensor x, torch::Tensor conv1_weight, torch::Tensor conv1_bias, torch::Tensor conv2_weight, torch::Tensor conv2_bias, torch::Tensor conv3_weight, torch::Tensor conv3_bias, torch::Tensor conv4_weight, torch::Tensor conv4_bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4, "x must be a 4-D CUDA tensor");
    x = x.contiguous();
    auto y = launch_conv_bias_relu(x, conv1_weight, conv1_bias);
    y = launch_conv_bias_relu(y, conv2_weight, conv2_bias);
    y = launch_conv_bias_relu(y, conv3_weight, conv3_bias);
    y = launch_conv_bias_relu(y, conv4_weight, conv4_bias);
    return launch_max_pool_2x2(y);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "vgg stack (missing pool)"); }
