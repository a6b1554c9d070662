// Depthwise 3x3 convolution with a shared-memory halo tile. Designed to fail: no __syncthreads between filling the tile and reading neighbours' entries (race).
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

constexpr int TW = 32, TH = 8;  // output tile per block; the input tile adds a 1-pixel halo

// Depthwise 3x3 conv: each block loads a (TH+2) x (TW+2) input tile of one (n, c) plane into shared memory
// (zeros outside the image), then each thread computes one output pixel from shared memory.
__global__ void depthwise_tiled(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                                float* __restrict__ y, int channels, int h, int wd) {
    __shared__ float tile[TH + 2][TW + 2];
    const int64_t plane = blockIdx.z;  // n * C + c
    const int c = (int)(plane % channels);
    const int x0 = blockIdx.x * TW, y0 = blockIdx.y * TH;
    const float* xp = x + plane * h * wd;
    for (int i = threadIdx.y * TW + threadIdx.x; i < (TH + 2) * (TW + 2); i += TW * TH) {
        const int ty = i / (TW + 2), tx = i % (TW + 2);
        const int iy = y0 - 1 + ty, ix = x0 - 1 + tx;
        tile[ty][tx] = (iy >= 0 && iy < h && ix >= 0 && ix < wd) ? xp[(int64_t)iy * wd + ix] : 0.0f;
    }
    const int ox = x0 + threadIdx.x, oy = y0 + threadIdx.y;
    if (ox >= wd || oy >= h) return;
    const float* wp = w + c * 9;
    float acc = bias[c];
#pragma unroll
    for (int ky = 0; ky < 3; ++ky)
#pragma unroll
        for (int kx = 0; kx < 3; ++kx) acc += tile[threadIdx.y + ky][threadIdx.x + kx] * wp[ky * 3 + kx];
    y[plane * h * wd + (int64_t)oy * wd + ox] = acc;
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4, "x must be a 4-D CUDA tensor");
    TORCH_CHECK(weight.size(2) == 3 && weight.size(3) == 3, "3x3 depthwise filter expected");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int64_t planes = x.size(0) * x.size(1);
    const int channels = (int)x.size(1), h = (int)x.size(2), wd = (int)x.size(3);
    auto y = torch::empty_like(x);
    if (y.numel() == 0) return y;
    TORCH_CHECK(planes <= 65535, "too many planes for grid.z");
    dim3 grid((unsigned)((wd + TW - 1) / TW), (unsigned)((h + TH - 1) / TH), (unsigned)planes), block(TW, TH);
    depthwise_tiled<<<grid, block>>>(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), channels, h, wd);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "depthwise conv2d (race)"); }
