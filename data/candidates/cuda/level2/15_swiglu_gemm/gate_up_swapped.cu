// SwiGLU, dual tiled. Designed to fail: SiLU is applied to the up projection and multiplied by the gate (gate_weight and up_weight roles swapped).
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

constexpr int TILE = 32;

// Dual tiled GEMM: each block stages one x tile and the matching gate and up weight tiles, accumulating both
// projections at once so x is read once for the two; silu(gate) * up is fused into the store.
__global__ void swiglu_tiled(const float* __restrict__ x, const float* __restrict__ wg, const float* __restrict__ wu,
                             float* __restrict__ y, int rows, int in_f, int hid) {
    __shared__ float xs[TILE][TILE];
    __shared__ float gs[TILE][TILE + 1];
    __shared__ float us[TILE][TILE + 1];
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    const int wrow = blockIdx.x * TILE + threadIdx.y;
    float g = 0.0f, u = 0.0f;
    for (int t = 0; t < in_f; t += TILE) {
        const int k = t + threadIdx.x;
        xs[threadIdx.y][threadIdx.x] = (row < rows && k < in_f) ? x[(int64_t)row * in_f + k] : 0.0f;
        const bool w_ok = wrow < hid && k < in_f;
        gs[threadIdx.y][threadIdx.x] = w_ok ? wg[(int64_t)wrow * in_f + k] : 0.0f;
        us[threadIdx.y][threadIdx.x] = w_ok ? wu[(int64_t)wrow * in_f + k] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) {
            const float xv = xs[threadIdx.y][kk];
            g += xv * gs[threadIdx.x][kk];
            u += xv * us[threadIdx.x][kk];
        }
        __syncthreads();
    }
    if (row < rows && col < hid) y[(int64_t)row * hid + col] = u / (1.0f + expf(-u)) * g;
}

torch::Tensor forward(torch::Tensor x, torch::Tensor gate_weight, torch::Tensor up_weight) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2, "x must be a 2-D CUDA tensor");
    x = x.contiguous();
    gate_weight = gate_weight.contiguous();
    up_weight = up_weight.contiguous();
    const int rows = (int)x.size(0), in_f = (int)x.size(1), hid = (int)gate_weight.size(0);
    auto y = torch::empty({rows, hid}, x.options());
    if (y.numel() == 0) return y;
    dim3 block(TILE, TILE), grid((hid + TILE - 1) / TILE, (rows + TILE - 1) / TILE);
    swiglu_tiled<<<grid, block>>>(x.data_ptr<float>(), gate_weight.data_ptr<float>(), up_weight.data_ptr<float>(),
                                  y.data_ptr<float>(), rows, in_f, hid);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "swiglu (gate/up swapped)"); }
