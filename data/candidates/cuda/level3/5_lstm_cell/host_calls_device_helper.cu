// LSTM cell, naive. Designed to fail: forward() sanity-checks the __device__ sigmoid helper from host code, which nvcc rejects (calling a __device__ function from a __host__ function).
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

__device__ __forceinline__ float sigmoidf_(float v) { return 1.0f / (1.0f + expf(-v)); }

// One thread per (sample, hidden unit): the four gate pre-activations as dot products of the x and h rows with the
// matching rows of W_ih and W_hh, written to the gates buffer.
__global__ void lstm_gates_naive(const float* __restrict__ x, const float* __restrict__ h, const float* __restrict__ wih,
                                 const float* __restrict__ whh, const float* __restrict__ bih, const float* __restrict__ bhh,
                                 float* __restrict__ gates, int batch, int in_f, int hid) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;  // 0 .. 4H
    const int b = blockIdx.y;
    if (col >= 4 * hid) return;
    const float* xr = x + (int64_t)b * in_f;
    const float* hr = h + (int64_t)b * hid;
    const float* wi = wih + (int64_t)col * in_f;
    const float* wh = whh + (int64_t)col * hid;
    float acc = bih[col] + bhh[col];
    for (int k = 0; k < in_f; ++k) acc += xr[k] * wi[k];
    for (int k = 0; k < hid; ++k) acc += hr[k] * wh[k];
    gates[(int64_t)b * 4 * hid + col] = acc;
}

// Pointwise LSTM update from the summed gate pre-activations [B, 4H] (chunks in input, forget, cell, output order);
// writes h' into columns [0, H) and c' into [H, 2H) of the [B, 2H] output.
__global__ void lstm_pointwise(const float* __restrict__ gates, const float* __restrict__ c, float* __restrict__ out, int batch, int hid) {
    const int64_t total = (int64_t)batch * hid;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int64_t b = idx / hid;
        const int j = (int)(idx % hid);
        const float* g = gates + b * 4 * hid;
        const float ig = sigmoidf_(g[0 * hid + j]), fg = sigmoidf_(g[1 * hid + j]);
        const float cg = tanhf(g[2 * hid + j]), og = sigmoidf_(g[3 * hid + j]);
        const float c_next = fg * c[idx] + ig * cg;
        out[b * 2 * hid + j] = og * tanhf(c_next);
        out[b * 2 * hid + hid + j] = c_next;
    }
}

torch::Tensor forward(torch::Tensor x, torch::Tensor h, torch::Tensor c, torch::Tensor weight_ih, torch::Tensor weight_hh,
                      torch::Tensor bias_ih, torch::Tensor bias_hh) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2, "x must be a 2-D CUDA tensor");
    x = x.contiguous(); h = h.contiguous(); c = c.contiguous();
    weight_ih = weight_ih.contiguous(); weight_hh = weight_hh.contiguous();
    bias_ih = bias_ih.contiguous(); bias_hh = bias_hh.contiguous();
    const int batch = (int)x.size(0), in_f = (int)x.size(1), hid = (int)h.size(1);
    (void)in_f;
    TORCH_CHECK(sigmoidf_(0.0f) == 0.5f, "activation helper is broken");
    auto gates = torch::empty({batch, 4 * hid}, x.options());
    auto out = torch::empty({batch, 2 * hid}, x.options());
    if (out.numel() == 0) return out;
    TORCH_CHECK(batch <= 65535, "batch too large for grid.y");
    lstm_gates_naive<<<dim3((4 * hid + 255) / 256, batch), 256>>>(x.data_ptr<float>(), h.data_ptr<float>(), weight_ih.data_ptr<float>(),
        weight_hh.data_ptr<float>(), bias_ih.data_ptr<float>(), bias_hh.data_ptr<float>(), gates.data_ptr<float>(), batch, in_f, hid);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const int64_t total = (int64_t)batch * hid;
    lstm_pointwise<<<(int)std::min<int64_t>((total + 255) / 256, 65535), 256>>>(gates.data_ptr<float>(), c.data_ptr<float>(),
                                                                                 out.data_ptr<float>(), batch, hid);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "lstm cell (does not compile)"); }
