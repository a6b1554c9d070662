// Rectangular matmul on TF32 tensor cores (wmma m16n16k8). Designed to fail: TF32 rounding over K=4096 exceeds the fp32 tolerance.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

#include <mma.h>
using namespace nvcuda;

// TF32 tensor cores via wmma (m16n16k8): each warp owns one 16x16 output tile and streams A and B fragments
// straight from global memory. Designed to fail: TF32 keeps 10 mantissa bits, so 4096-term dot products carry
// errors of ~1e-2..1e-1, beyond the task's fp32 tolerance (atol 1e-2, rtol 1e-3).
constexpr int WM = 16, WN = 16, WK = 8;

__global__ void gemm_wmma_tf32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                               int m, int n, int k) {
    const int warp_id = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int tiles_n = n / WN;
    const int tile_m = warp_id / tiles_n, tile_n = warp_id % tiles_n;
    if (tile_m >= m / WM) return;  // whole warp exits together
    wmma::fragment<wmma::matrix_a, WM, WN, WK, wmma::precision::tf32, wmma::row_major> a_frag;
    wmma::fragment<wmma::matrix_b, WM, WN, WK, wmma::precision::tf32, wmma::row_major> b_frag;
    wmma::fragment<wmma::accumulator, WM, WN, WK, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < k; kk += WK) {
        wmma::load_matrix_sync(a_frag, a + (size_t)tile_m * WM * k + kk, k);
        wmma::load_matrix_sync(b_frag, b + (size_t)kk * n + tile_n * WN, n);
#pragma unroll
        for (int i = 0; i < a_frag.num_elements; ++i) a_frag.x[i] = wmma::__float_to_tf32(a_frag.x[i]);
#pragma unroll
        for (int i = 0; i < b_frag.num_elements; ++i) b_frag.x[i] = wmma::__float_to_tf32(b_frag.x[i]);
        wmma::mma_sync(acc, a_frag, b_frag, acc);
    }
    wmma::store_matrix_sync(c + (size_t)tile_m * WM * n + tile_n * WN, acc, n, wmma::mem_row_major);
}

torch::Tensor forward(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "inputs must be CUDA tensors");
    A = A.contiguous();
    B = B.contiguous();
    const int m = (int)A.size(0), k = (int)A.size(1), n = (int)B.size(1);
    TORCH_CHECK(m % WM == 0 && n % WN == 0 && k % WK == 0, "this kernel needs M, N multiples of 16 and K of 8");
    auto C = torch::empty({m, n}, A.options());
    const int64_t warps = (int64_t)(m / WM) * (n / WN);
    const int threads = 128;  // 4 warps per block
    gemm_wmma_tf32<<<(unsigned)((warps * 32 + threads - 1) / threads), threads>>>(
        A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), m, n, k);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "rectangular matmul (wmma tf32)"); }
