// x * scale[c] + shift[c]. Designed to fail: the channel is taken as i % C (the channels-last formula) instead of (i / HW) % C for this NCHW tensor.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// One grid-stride loop over all elements; the channel of element i in NCHW is (i / HW) % C.
__global__ void channel_affine_flat(const float* __restrict__ x, const float* __restrict__ scale, const float* __restrict__ shift, float* __restrict__ y, int64_t n, int64_t channels, int64_t hw) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t ch = i % channels;
        const float a = scale[ch], s = shift[ch];
        y[i] = fmaf(x[i], a, s);
    }
}

torch::Tensor forward(torch::Tensor x, torch::Tensor scale, torch::Tensor shift) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4, "x must be a 4-D NCHW CUDA tensor");
    x = x.contiguous();
    scale = scale.contiguous();
    shift = shift.contiguous();
    const int64_t nb = x.size(0), channels = x.size(1), hw = x.size(2) * x.size(3);
    auto y = torch::empty_like(x);
    if (y.numel() == 0) return y;
    const int64_t n = x.numel();
    const int blocks = (int)std::min<int64_t>((n + 255) / 256, 65535);
    channel_affine_flat<<<blocks, 256>>>(x.data_ptr<float>(), scale.data_ptr<float>(), shift.data_ptr<float>(), y.data_ptr<float>(), n, channels, hw);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "channel scale/shift (wrong broadcast)"); }
