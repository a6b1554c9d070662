// Conv2d + BN + ReLU. Designed to fail: the epilogue applies ReLU before the batch-norm affine (negative shifts then produce negative outputs).
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// Folds eval-mode batch norm into a per-feature scale and shift: a = gamma * rsqrt(var + eps), s = beta - mean * a.
__global__ void fold_batch_norm(const float* __restrict__ gamma, const float* __restrict__ beta, const float* __restrict__ mean,
                                const float* __restrict__ var, float* __restrict__ scale, float* __restrict__ shift, int n, float eps,
                                bool var_is_std) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float a = var_is_std ? gamma[i] / (var[i] + eps) : gamma[i] * rsqrtf(var[i] + eps);
    scale[i] = a;
    shift[i] = beta[i] - mean[i] * a;
}

// Fused tail of the convolution (o: output channel).
__device__ __forceinline__ float epilogue(float v, int o, const float* __restrict__ p0, const float* __restrict__ p1) {
    (void)o; (void)p0; (void)p1;
    return fmaf(fmaxf(v, 0.0f), p0[o], p1[o]);
}

// Direct convolution, one thread per output element (grid-stride over N*OC*OH*OW, 64-bit indices).
// weight is [OC, IC, KH, KW] (groups = 1); bias may be null. epilogue(acc, channel, p0, p1) is defined above
// (p0/p1: optional per-channel parameters of the fused tail).
__global__ void conv2d_direct(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                              float* __restrict__ y, int nb, int ic, int ih, int iw, int oc, int kh, int kw,
                              int oh, int ow, int sh, int sw, int ph, int pw,
                              const float* __restrict__ p0, const float* __restrict__ p1) {
    const int64_t total = (int64_t)nb * oc * oh * ow;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int ox = (int)(idx % ow);
        const int oy = (int)((idx / ow) % oh);
        const int o = (int)((idx / ((int64_t)ow * oh)) % oc);
        const int n = (int)(idx / ((int64_t)ow * oh * oc));
        float acc = bias ? bias[o] : 0.0f;
        for (int c = 0; c < ic; ++c) {
            const float* xp = x + ((int64_t)n * ic + c) * ih * iw;
            const float* wp = w + ((int64_t)o * ic + c) * kh * kw;
            for (int ky = 0; ky < kh; ++ky) {
                const int iy = oy * sh - ph + ky;
                if (iy < 0 || iy >= ih) continue;
                for (int kx = 0; kx < kw; ++kx) {
                    const int ix = ox * sw - pw + kx;
                    if (ix < 0 || ix >= iw) continue;
                    acc += xp[(int64_t)iy * iw + ix] * wp[ky * kw + kx];
                }
            }
        }
        y[idx] = epilogue(acc, o, p0, p1);
    }
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bn_weight, torch::Tensor bn_bias, torch::Tensor bn_running_mean, torch::Tensor bn_running_var) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4, "x must be a 4-D CUDA tensor");
    bn_weight = bn_weight.contiguous();
    bn_bias = bn_bias.contiguous();
    bn_running_mean = bn_running_mean.contiguous();
    bn_running_var = bn_running_var.contiguous();
    const int features = (int)bn_weight.numel();
    auto folded = torch::empty({2, features}, x.options());
    fold_batch_norm<<<(features + 255) / 256, 256>>>(bn_weight.data_ptr<float>(), bn_bias.data_ptr<float>(),
        bn_running_mean.data_ptr<float>(), bn_running_var.data_ptr<float>(), folded.data_ptr<float>(),
        folded.data_ptr<float>() + features, features, 1e-5f, false);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    x = x.contiguous();
    weight = weight.contiguous();
    const int nb = (int)x.size(0), ic = (int)x.size(1), ih = (int)x.size(2), iw = (int)x.size(3);
    const int oc = (int)weight.size(0), kh = (int)weight.size(2), kw = (int)weight.size(3);
    TORCH_CHECK(weight.size(1) == ic, "weight/input channel mismatch");
    const int sh = 1, sw = 1, ph = 1, pw = 1;
    const int oh = (ih + 2 * ph - kh) / sh + 1, ow = (iw + 2 * pw - kw) / sw + 1;
    auto y = torch::empty({nb, oc, oh, ow}, x.options());
    const int64_t total = y.numel();
    if (total == 0) return y;
    const int blocks = (int)std::min<int64_t>((total + 255) / 256, 1 << 20);
    conv2d_direct<<<blocks, 256>>>(x.data_ptr<float>(), weight.data_ptr<float>(), nullptr, y.data_ptr<float>(),
                                   nb, ic, ih, iw, oc, kh, kw, oh, ow, sh, sw, ph, pw, folded.data_ptr<float>(), folded.data_ptr<float>() + features);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "conv bn relu (wrong order)"); }
