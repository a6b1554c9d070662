// avg_pool3d. Designed to fail: it divides by the number of in-image taps (count_include_pad=False semantics) while the task includes the padding in the count.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

constexpr int K = 3, S = 2, P = 1;

// avg_pool3d(kernel 3, stride 2, padding 1, count_include_pad=True): one thread per output; the sum over the
// in-image part of the window is divided by the full window size (27), as count_include_pad requires (this version divides by the in-image count instead).
__global__ void avg_pool3d_kernel(const float* __restrict__ x, float* __restrict__ y, int d, int h, int wd,
                                  int od, int oh, int ow, int64_t total) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int ox = (int)(idx % ow), oy = (int)((idx / ow) % oh), oz = (int)((idx / ((int64_t)ow * oh)) % od);
        const int64_t plane = idx / ((int64_t)ow * oh * od);
        const float* xp = x + plane * d * h * wd;
        float s = 0.0f;
        int count = 0;
        for (int kz = 0; kz < K; ++kz) {
            const int iz = oz * S - P + kz;
            if (iz < 0 || iz >= d) continue;
            for (int ky = 0; ky < K; ++ky) {
                const int iy = oy * S - P + ky;
                if (iy < 0 || iy >= h) continue;
                for (int kx = 0; kx < K; ++kx) {
                    const int ix = ox * S - P + kx;
                    if (ix < 0 || ix >= wd) continue;
                    s += xp[((int64_t)iz * h + iy) * wd + ix];
                    ++count;
                }
            }
        }
        (void)count;
        y[idx] = s / (float)count;
    }
}

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 5, "x must be a 5-D CUDA tensor");
    x = x.contiguous();
    const int d = (int)x.size(2), h = (int)x.size(3), wd = (int)x.size(4);
    const int od = (d + 2 * P - K) / S + 1, oh = (h + 2 * P - K) / S + 1, ow = (wd + 2 * P - K) / S + 1;
    auto y = torch::empty({x.size(0), x.size(1), od, oh, ow}, x.options());
    const int64_t total = y.numel();
    if (total == 0) return y;
    avg_pool3d_kernel<<<(int)std::min<int64_t>((total + 255) / 256, 1 << 20), 256>>>(x.data_ptr<float>(), y.data_ptr<float>(),
        d, h, wd, od, oh, ow, total);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "avg_pool3d (excludes padding)"); }
