// Conv3d 3x3x3 with the output channel's filter bank in shared memory.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

constexpr int THREADS = 256;

// One block per (256 flattened output positions, output channel, sample); the [IC, 3, 3, 3] filter of the
// block's channel is staged in dynamic shared memory.
__global__ void conv3d_smem_weights(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
                                    float* __restrict__ y, int ic, int d, int h, int wd, int oc, int k, int pad) {
    extern __shared__ float ws[];
    const int o = blockIdx.y, n = blockIdx.z;
    const int filter = ic * k * k * k;
    for (int i = threadIdx.x; i < filter; i += THREADS) ws[i] = w[(int64_t)o * filter + i];
    __syncthreads();
    const int64_t plane = (int64_t)d * h * wd;  // stride 1, 'same' padding: output extent == input extent
    const int64_t pos = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (pos >= plane) return;
    const int ox = (int)(pos % wd), oy = (int)((pos / wd) % h), oz = (int)(pos / ((int64_t)wd * h));
    float acc = bias[o];
    for (int c = 0; c < ic; ++c) {
        const float* xp = x + ((int64_t)n * ic + c) * plane;
        const float* wp = ws + c * k * k * k;
        for (int kz = 0; kz < k; ++kz) {
            const int iz = oz - pad + kz;
            if (iz < 0 || iz >= d) continue;
            for (int ky = 0; ky < k; ++ky) {
                const int iy = oy - pad + ky;
                if (iy < 0 || iy >= h) continue;
                for (int kx = 0; kx < k; ++kx) {
                    const int ix = ox - pad + kx;
                    if (ix < 0 || ix >= wd) continue;
                    acc += xp[((int64_t)iz * h + iy) * wd + ix] * wp[(kz * k + ky) * k + kx];
                }
            }
        }
    }
    y[((int64_t)n * oc + o) * plane + pos] = acc;
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
    const size_t smem = (size_t)ic * k * k * k * sizeof(float);
    TORCH_CHECK(smem <= 48 * 1024 && oc <= 65535 && nb <= 65535, "configuration too large");
    const int64_t plane = (int64_t)d * h * wd;
    dim3 grid((unsigned)((plane + THREADS - 1) / THREADS), (unsigned)oc, (unsigned)nb);
    conv3d_smem_weights<<<grid, THREADS, smem>>>(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                                                 y.data_ptr<float>(), ic, d, h, wd, oc, k, 1);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "conv3d (filter in smem)"); }
