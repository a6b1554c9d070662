// Conv2d with filter banks in shared memory into a buffer, then a 2x2 max pool + ReLU kernel.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

__device__ __forceinline__ float epilogue(float v, int, const float*, const float*) { return v; }

constexpr int TILE_W = 32, TILE_H = 8;  // 256 output pixels per block

// One block per (32x8 tile of output pixels, output channel, sample): the channel's whole filter bank
// [IC, KH, KW] is staged in dynamic shared memory once and reused by all 256 threads.
__global__ void conv2d_smem_weights(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                                    float* __restrict__ y, int ic, int ih, int iw, int oc, int kh, int kw,
                                    int oh, int ow, int sh, int sw, int ph, int pw, int tiles_x,
                                    const float* __restrict__ p0, const float* __restrict__ p1) {
    extern __shared__ float ws[];
    const int o = blockIdx.y, n = blockIdx.z;
    const int filter = ic * kh * kw;
    for (int i = threadIdx.y * TILE_W + threadIdx.x; i < filter; i += TILE_W * TILE_H) ws[i] = w[(int64_t)o * filter + i];
    __syncthreads();
    const int ox = (blockIdx.x % tiles_x) * TILE_W + threadIdx.x;
    const int oy = (blockIdx.x / tiles_x) * TILE_H + threadIdx.y;
    if (ox >= ow || oy >= oh) return;  // after the barrier: no thread skips it
    float acc = bias ? bias[o] : 0.0f;
    for (int c = 0; c < ic; ++c) {
        const float* xp = x + ((int64_t)n * ic + c) * ih * iw;
        const float* wp = ws + c * kh * kw;
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
    y[(((int64_t)n * oc + o) * oh + oy) * ow + ox] = epilogue(acc, o, p0, p1);
}

// 2x2 / stride-2 max pool + ReLU over the conv buffer, one thread per pooled output.
__global__ void maxpool_relu(const float* __restrict__ c, float* __restrict__ y, int h, int wd, int ph, int pw, int64_t total) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int px = (int)(idx % pw), py = (int)((idx / pw) % ph);
        const float* p = c + (idx / ((int64_t)pw * ph)) * h * wd + (int64_t)(2 * py) * wd + 2 * px;
        y[idx] = fmaxf(fmaxf(fmaxf(p[0], p[1]), fmaxf(p[wd], p[wd + 1])), 0.0f);
    }
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4, "x must be a 4-D CUDA tensor");
    bias = bias.contiguous();
    x = x.contiguous();
    weight = weight.contiguous();
    const int nb = (int)x.size(0), ic = (int)x.size(1), ih = (int)x.size(2), iw = (int)x.size(3);
    const int oc = (int)weight.size(0), kh = (int)weight.size(2), kw = (int)weight.size(3);
    TORCH_CHECK(weight.size(1) == ic, "weight/input channel mismatch");
    const int sh = 1, sw = 1, ph = 1, pw = 1;
    const int oh = (ih + 2 * ph - kh) / sh + 1, ow = (iw + 2 * pw - kw) / sw + 1;
    auto y = torch::empty({nb, oc, oh, ow}, x.options());
    if (y.numel() == 0) return y;
    const size_t smem = (size_t)ic * kh * kw * sizeof(float);
    TORCH_CHECK(smem <= 48 * 1024, "filter bank too large for default shared memory");
    TORCH_CHECK(oc <= 65535 && nb <= 65535, "grid too large");
    const int tiles_x = (ow + TILE_W - 1) / TILE_W, tiles_y = (oh + TILE_H - 1) / TILE_H;
    dim3 grid((unsigned)(tiles_x * tiles_y), (unsigned)oc, (unsigned)nb), block(TILE_W, TILE_H);
    conv2d_smem_weights<<<grid, block, smem>>>(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
                                               ic, ih, iw, oc, kh, kw, oh, ow, sh, sw, ph, pw, tiles_x, nullptr, nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const int pooled_h = oh / 2, pooled_w = ow / 2;
    auto out = torch::empty({nb, oc, pooled_h, pooled_w}, x.options());
    const int64_t total = out.numel();
    if (total == 0) return out;
    maxpool_relu<<<(int)std::min<int64_t>((total + 255) / 256, 1 << 20), 256>>>(y.data_ptr<float>(), out.data_ptr<float>(), oh, ow, pooled_h, pooled_w, total);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "conv maxpool relu (two kernels)"); }
