// Conv3d with 3-D thread blocks. Designed to fail: a 32x32x2 block (2048 threads) exceeds the 1024-thread limit, so the launch fails (invalid configuration argument).
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// 3-D thread blocks over (x, y, pairs of z-slices). Designed to fail: the block is 32x32x2 = 2048 threads, over the
// 1024-thread limit, so every launch fails with 'invalid configuration argument'.
__global__ void conv3d_blocked(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                               float* __restrict__ y, int nb, int ic, int d, int h, int wd, int oc, int k, int pad) {
    const int ox = blockIdx.x * blockDim.x + threadIdx.x;
    const int oy = blockIdx.y * blockDim.y + threadIdx.y;
    const int zpairs = (d + 1) / 2;
    const int oz = (blockIdx.z % zpairs) * 2 + threadIdx.z;
    const int o = (blockIdx.z / zpairs) % oc, n = blockIdx.z / (zpairs * oc);
    if (ox >= wd || oy >= h || oz >= d) return;
    float acc = bias[o];
    for (int c = 0; c < ic; ++c)
        for (int kz = 0; kz < k; ++kz)
            for (int ky = 0; ky < k; ++ky)
                for (int kx = 0; kx < k; ++kx) {
                    const int iz = oz - pad + kz, iy = oy - pad + ky, ix = ox - pad + kx;
                    if (iz < 0 || iz >= d || iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                    acc += x[(((int64_t)n * ic + c) * d + iz) * h * wd + (int64_t)iy * wd + ix] *
                           w[((((int64_t)o * ic + c) * k + kz) * k + ky) * k + kx];
                }
    y[(((int64_t)n * oc + o) * d + oz) * h * wd + (int64_t)oy * wd + ox] = acc;
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 5, "x must be a 5-D CUDA tensor");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int nb = (int)x.size(0), ic = (int)x.size(1), d = (int)x.size(2), h = (int)x.size(3), wd = (int)x.size(4);
    const int oc = (int)weight.size(0), k = (int)weight.size(2);
    TORCH_CHECK(k == 3, "this kernel implements the task's 3x3x3 'same' convolution");
    auto y = torch::empty({nb, oc, d, h, wd}, x.options());
    if (y.numel() == 0) return y;
    dim3 block(32, 32, 2);  // 2048 threads: over the 1024-per-block limit
    dim3 grid((unsigned)((wd + 31) / 32), (unsigned)((h + 31) / 32), (unsigned)((int64_t)nb * oc * ((d + 1) / 2)));
    conv3d_blocked<<<grid, block>>>(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), nb, ic, d, h, wd, oc, k, 1);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "conv3d (invalid launch)"); }
