// Conv3d + ReLU into a buffer, then a 2x2x2 average pool kernel.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// Kernel 1: conv3d (3x3x3, pad 1) + bias + ReLU, one thread per output voxel, into a full-resolution buffer.
__global__ void conv3d_relu(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                            float* __restrict__ y, int ic, int d, int h, int wd, int oc, int64_t total) {
    const int64_t plane = (int64_t)d * h * wd;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int64_t pos = idx % plane;
        const int o = (int)((idx / plane) % oc), n = (int)(idx / (plane * oc));
        const int ox = (int)(pos % wd), oy = (int)((pos / wd) % h), oz = (int)(pos / ((int64_t)wd * h));
        float acc = bias[o];
        for (int c = 0; c < ic; ++c) {
            const float* xp = x + ((int64_t)n * ic + c) * plane;
            const float* wp = w + ((int64_t)o * ic + c) * 27;
            for (int kz = 0; kz < 3; ++kz) {
                const int iz = oz - 1 + kz;
                if (iz < 0 || iz >= d) continue;
                for (int ky = 0; ky < 3; ++ky) {
                    const int iy = oy - 1 + ky;
                    if (iy < 0 || iy >= h) continue;
                    for (int kx = 0; kx < 3; ++kx) {
                        const int ix = ox - 1 + kx;
                        if (ix >= 0 && ix < wd) acc += xp[((int64_t)iz * h + iy) * wd + ix] * wp[(kz * 3 + ky) * 3 + kx];
                    }
                }
            }
        }
        y[idx] = fmaxf(acc, 0.0f);
    }
}

// Kernel 2: 2x2x2 / stride-2 average pool.
__global__ void avgpool2(const float* __restrict__ c, float* __restrict__ y, int d, int h, int wd, int pd, int ph, int pw, int64_t total) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int px = (int)(idx % pw), py = (int)((idx / pw) % ph), pz = (int)((idx / ((int64_t)pw * ph)) % pd);
        const float* p = c + (idx / ((int64_t)pw * ph * pd)) * d * h * wd + ((int64_t)(2 * pz) * h + 2 * py) * wd + 2 * px;
        const int64_t hw = (int64_t)h * wd;
        y[idx] = (p[0] + p[1] + p[wd] + p[wd + 1] + p[hw] + p[hw + 1] + p[hw + wd] + p[hw + wd + 1]) * 0.125f;
    }
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 5, "x must be a 5-D CUDA tensor");
    TORCH_CHECK(weight.size(2) == 3, "3x3x3 filters expected");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int nb = (int)x.size(0), ic = (int)x.size(1), d = (int)x.size(2), h = (int)x.size(3), wd = (int)x.size(4);
    const int oc = (int)weight.size(0);
    auto conv = torch::empty({nb, oc, d, h, wd}, x.options());
    auto y = torch::empty({nb, oc, d / 2, h / 2, wd / 2}, x.options());
    if (y.numel() == 0) return y;
    const int64_t total = conv.numel(), pooled = y.numel();
    conv3d_relu<<<(int)std::min<int64_t>((total + 255) / 256, 1 << 20), 256>>>(x.data_ptr<float>(), weight.data_ptr<float>(),
        bias.data_ptr<float>(), conv.data_ptr<float>(), ic, d, h, wd, oc, total);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    avgpool2<<<(int)std::min<int64_t>((pooled + 255) / 256, 1 << 20), 256>>>(conv.data_ptr<float>(), y.data_ptr<float>(), d, h, wd,
        d / 2, h / 2, wd / 2, pooled);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "conv3d relu avgpool (two kernels)"); }
