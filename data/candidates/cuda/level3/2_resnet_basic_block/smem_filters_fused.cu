// ResNet basic block with per-channel filter banks in shared memory and fused BN/residual/ReLU epilogues.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// Eval-mode batch norm folded into scale/shift: a = gamma * rsqrt(var + eps), s = beta - mean * a.
__global__ void fold_bn(const float* __restrict__ g, const float* __restrict__ b, const float* __restrict__ mean,
                        const float* __restrict__ var, float* __restrict__ scale, float* __restrict__ shift, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float a = g[i] * rsqrtf(var[i] + 1e-5f);
    scale[i] = a;
    shift[i] = b[i] - mean[i] * a;
}

// Returns [2, C]: row 0 the scales, row 1 the shifts.
static torch::Tensor fold_batch_norm(torch::Tensor g, torch::Tensor b, torch::Tensor mean, torch::Tensor var) {
    g = g.contiguous(); b = b.contiguous(); mean = mean.contiguous(); var = var.contiguous();
    const int n = (int)g.numel();
    auto out = torch::empty({2, n}, g.options());
    fold_bn<<<(n + 255) / 256, 256>>>(g.data_ptr<float>(), b.data_ptr<float>(), mean.data_ptr<float>(), var.data_ptr<float>(),
                                      out.data_ptr<float>(), out.data_ptr<float>() + n, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

constexpr int TW = 32, TH = 8;

// 3x3 conv with the output channel's [IC, 3, 3] filter in dynamic shared memory, folded-BN affine epilogue,
// optional residual and ReLU. One block per (32x8 pixel tile, output channel, sample).
__global__ void conv3x3_smem_affine(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ scale,
                                    const float* __restrict__ shift, const float* __restrict__ res, float* __restrict__ y,
                                    int ic, int h, int wd, int oc, int tiles_x) {
    extern __shared__ float ws[];
    const int o = blockIdx.y, n = blockIdx.z;
    for (int i = threadIdx.y * TW + threadIdx.x; i < ic * 9; i += TW * TH) ws[i] = w[(int64_t)o * ic * 9 + i];
    __syncthreads();
    const int ox = (blockIdx.x % tiles_x) * TW + threadIdx.x, oy = (blockIdx.x / tiles_x) * TH + threadIdx.y;
    if (ox >= wd || oy >= h) return;
    const int64_t hw = (int64_t)h * wd;
    float acc = 0.0f;
    for (int c = 0; c < ic; ++c) {
        const float* xp = x + ((int64_t)n * ic + c) * hw;
        const float* wp = ws + c * 9;
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
    const int64_t idx = ((int64_t)n * oc + o) * hw + (int64_t)oy * wd + ox;
    float v = fmaf(acc, scale[o], shift[o]);
    if (res) v += res[idx];
    y[idx] = fmaxf(v, 0.0f);
}

static void launch_conv_smem(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bn, const float* res, torch::Tensor& y) {
    const int nb = (int)x.size(0), ic = (int)x.size(1), h = (int)x.size(2), wd = (int)x.size(3), oc = (int)w.size(0);
    const int tiles_x = (wd + TW - 1) / TW, tiles_y = (h + TH - 1) / TH;
    const size_t smem = (size_t)ic * 9 * sizeof(float);
    TORCH_CHECK(smem <= 48 * 1024 && oc <= 65535 && nb <= 65535, "configuration too large");
    dim3 grid((unsigned)(tiles_x * tiles_y), (unsigned)oc, (unsigned)nb), block(TW, TH);
    conv3x3_smem_affine<<<grid, block, smem>>>(x.data_ptr<float>(), w.data_ptr<float>(), bn.data_ptr<float>(), bn.data_ptr<float>() + oc,
                                               res, y.data_ptr<float>(), ic, h, wd, oc, tiles_x);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

torch::Tensor forward(torch::Tensor x, torch::Tensor conv1_weight, torch::Tensor bn1_weight, torch::Tensor bn1_bias, torch::Tensor conv2_weight, torch::Tensor bn2_weight, torch::Tensor bn2_bias, torch::Tensor bn1_running_mean, torch::Tensor bn1_running_var, torch::Tensor bn2_running_mean, torch::Tensor bn2_running_var) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4, "x must be a 4-D CUDA tensor");
    x = x.contiguous();
    conv1_weight = conv1_weight.contiguous();
    conv2_weight = conv2_weight.contiguous();
    auto bn1 = fold_batch_norm(bn1_weight, bn1_bias, bn1_running_mean, bn1_running_var);
    auto bn2 = fold_batch_norm(bn2_weight, bn2_bias, bn2_running_mean, bn2_running_var);
    auto y1 = torch::empty_like(x);
    auto y = torch::empty_like(x);
    if (x.numel() == 0) return y;
    launch_conv_smem(x, conv1_weight, bn1, nullptr, y1);
    launch_conv_smem(y1, conv2_weight, bn2, x.data_ptr<float>(), y);
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "resnet basic block (smem filters)"); }
