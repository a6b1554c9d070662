// Depthwise-separable block: depthwise 3x3 + folded BN1 + ReLU, then a tiled 1x1 GEMM with folded BN2 + ReLU.
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

// Depthwise 3x3 (pad 1) with folded BN1 + ReLU, one thread per element.
__global__ void depthwise_bn_relu(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ scale,
                                  const float* __restrict__ shift, float* __restrict__ y, int channels, int h, int wd, int64_t total) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int ox = (int)(idx % wd), oy = (int)((idx / wd) % h);
        const int64_t plane = idx / ((int64_t)wd * h);
        const int c = (int)(plane % channels);
        const float* xp = x + plane * h * wd;
        float acc = 0.0f;
#pragma unroll
        for (int ky = 0; ky < 3; ++ky) {
            const int iy = oy - 1 + ky;
            if (iy < 0 || iy >= h) continue;
#pragma unroll
            for (int kx = 0; kx < 3; ++kx) {
                const int ix = ox - 1 + kx;
                if (ix >= 0 && ix < wd) acc += xp[(int64_t)iy * wd + ix] * w[c * 9 + ky * 3 + kx];
            }
        }
        y[idx] = fmaxf(fmaf(acc, scale[c], shift[c]), 0.0f);
    }
}

constexpr int TILE = 32;

// Pointwise 1x1 conv as a per-sample tiled GEMM out[o][p] = sum_c W[o][c] d[c][p], with folded BN2 + ReLU.
__global__ void pointwise_bn_relu(const float* __restrict__ d, const float* __restrict__ w, const float* __restrict__ scale,
                                  const float* __restrict__ shift, float* __restrict__ y, int ic, int oc, int64_t hw) {
    __shared__ float ws[TILE][TILE + 1];
    __shared__ float ds[TILE][TILE];
    const int64_t n = blockIdx.z;
    const int o = blockIdx.y * TILE + threadIdx.y;
    const int64_t p = (int64_t)blockIdx.x * TILE + threadIdx.x;
    const float* dn = d + n * ic * hw;
    float acc = 0.0f;
    for (int t = 0; t < ic; t += TILE) {
        ws[threadIdx.y][threadIdx.x] = (o < oc && t + threadIdx.x < ic) ? w[(int64_t)o * ic + t + threadIdx.x] : 0.0f;
        ds[threadIdx.y][threadIdx.x] = (t + threadIdx.y < ic && p < hw) ? dn[(int64_t)(t + threadIdx.y) * hw + p] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += ws[threadIdx.y][k] * ds[k][threadIdx.x];
        __syncthreads();
    }
    if (o < oc && p < hw) y[(n * oc + o) * hw + p] = fmaxf(fmaf(acc, scale[o], shift[o]), 0.0f);
}

torch::Tensor forward(torch::Tensor x, torch::Tensor depthwise_weight, torch::Tensor bn1_weight, torch::Tensor bn1_bias, torch::Tensor pointwise_weight, torch::Tensor bn2_weight, torch::Tensor bn2_bias, torch::Tensor bn1_running_mean, torch::Tensor bn1_running_var, torch::Tensor bn2_running_mean, torch::Tensor bn2_running_var) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4, "x must be a 4-D CUDA tensor");
    x = x.contiguous();
    depthwise_weight = depthwise_weight.contiguous();
    pointwise_weight = pointwise_weight.contiguous();
    const int nb = (int)x.size(0), ic = (int)x.size(1), h = (int)x.size(2), wd = (int)x.size(3), oc = (int)pointwise_weight.size(0);
    const int64_t hw = (int64_t)h * wd;
    auto bn1 = fold_batch_norm(bn1_weight, bn1_bias, bn1_running_mean, bn1_running_var);
    auto bn2 = fold_batch_norm(bn2_weight, bn2_bias, bn2_running_mean, bn2_running_var);
    auto dw = torch::empty_like(x);
    auto y = torch::empty({nb, oc, h, wd}, x.options());
    if (y.numel() == 0) return y;
    depthwise_bn_relu<<<(int)std::min<int64_t>((dw.numel() + 255) / 256, 1 << 20), 256>>>(x.data_ptr<float>(), depthwise_weight.data_ptr<float>(),
        bn1.data_ptr<float>(), bn1.data_ptr<float>() + ic, dw.data_ptr<float>(), ic, h, wd, dw.numel());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    TORCH_CHECK(nb <= 65535, "batch too large for grid.z");
    dim3 block(TILE, TILE), grid((unsigned)((hw + TILE - 1) / TILE), (unsigned)((oc + TILE - 1) / TILE), (unsigned)nb);
    pointwise_bn_relu<<<grid, block>>>(dw.data_ptr<float>(), pointwise_weight.data_ptr<float>(), bn2.data_ptr<float>(),
                                       bn2.data_ptr<float>() + oc, y.data_ptr<float>(), ic, oc, hw);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "depthwise separable (tiled pointwise)"); }
