// A @ B.T on TF32 tensor cores with the 3xTF32 error-compensated split.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

#include <mma.h>
using namespace nvcuda;

// A @ B.T on TF32 tensor cores with the 3xTF32 split: every operand x = big + small (both TF32), and
// a*b ~= big_a*big_b + big_a*small_b + small_a*big_b recovers close to fp32 accuracy (the small*small term is
// below fp32 rounding). Each warp owns one 16x16 output tile; B (N, K) row-major is B.T in column-major.
constexpr int WM = 16, WN = 16, WK = 8;

using FragA = wmma::fragment<wmma::matrix_a, WM, WN, WK, wmma::precision::tf32, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, WM, WN, WK, wmma::precision::tf32, wmma::col_major>;

template <typename Frag>
__device__ __forceinline__ void split_tf32(Frag& big, Frag& small) {
#pragma unroll
    for (int i = 0; i < big.num_elements; ++i) {
        const float v = big.x[i];
        const float hi = wmma::__float_to_tf32(v);
        big.x[i] = hi;
        small.x[i] = wmma::__float_to_tf32(v - hi);
    }
}

__global__ void gemm_abt_3xtf32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                int m, int n, int k) {
    const int warp_id = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int tiles_n = n / WN;
    const int tile_m = warp_id / tiles_n, tile_n = warp_id % tiles_n;
    if (tile_m >= m / WM) return;
    FragA a_big, a_small;
    FragB b_big, b_small;
    wmma::fragment<wmma::accumulator, WM, WN, WK, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < k; kk += WK) {
        wmma::load_matrix_sync(a_big, a + (size_t)tile_m * WM * k + kk, k);
        wmma::load_matrix_sync(b_big, b + (size_t)tile_n * WN * k + kk, k);
        split_tf32(a_big, a_small);
        split_tf32(b_big, b_small);
        // small terms first so they are not swamped by the large one
        wmma::mma_sync(acc, a_small, b_big, acc);
        wmma::mma_sync(acc, a_big, b_small, acc);
        wmma::mma_sync(acc, a_big, b_big, acc);
    }
    wmma::store_matrix_sync(c + (size_t)tile_m * WM * n + tile_n * WN, acc, n, wmma::mem_row_major);
}

torch::Tensor forward(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "inputs must be CUDA tensors");
    A = A.contiguous();
    B = B.contiguous();
    const int m = (int)A.size(0), k = (int)A.size(1), n = (int)B.size(0);
    TORCH_CHECK(B.size(1) == k, "inner dimensions differ");
    TORCH_CHECK(m % WM == 0 && n % WN == 0 && k % WK == 0, "this kernel needs M, N multiples of 16 and K of 8");
    auto C = torch::empty({m, n}, A.options());
    const int64_t warps = (int64_t)(m / WM) * (n / WN);
    const int threads = 128;
    gemm_abt_3xtf32<<<(unsigned)((warps * 32 + threads - 1) / threads), threads>>>(
        A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), m, n, k);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "A @ B.T (wmma 3xTF32)"); }
