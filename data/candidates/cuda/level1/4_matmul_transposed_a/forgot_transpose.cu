// A.T @ B. Designed to fail: A is indexed as if it were (M, K) row-major, i.e. A @ B on a reinterpreted buffer; with M == N the shapes still match, the values do not.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

constexpr int TILE = 32;

// Shared-memory tiled GEMM over strided operands: A(m, k) = a[m * sam + k * sak], B(k, n) = b[k * sbk + n * sbn],
// one 32x32 output tile per block and batch index blockIdx.z (batch strides sa/sb/sc).
__global__ void gemm_tiled(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                           int m, int n, int k, int64_t sam, int64_t sak, int64_t sbk, int64_t sbn,
                           int64_t sa, int64_t sb, int64_t sc) {
    __shared__ float as[TILE][TILE];
    __shared__ float bs[TILE][TILE + 1];  // padded against bank conflicts on column reads
    a += blockIdx.z * sa;
    b += blockIdx.z * sb;
    c += blockIdx.z * sc;
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < k; t += TILE) {
        as[threadIdx.y][threadIdx.x] = (row < m && t + threadIdx.x < k) ? a[row * sam + (int64_t)(t + threadIdx.x) * sak] : 0.0f;
        bs[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < k) ? b[(int64_t)(t + threadIdx.y) * sbk + col * sbn] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) acc += as[threadIdx.y][kk] * bs[kk][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n) c[(int64_t)row * n + col] = acc;
}

torch::Tensor forward(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32, "float32 only");
    A = A.contiguous();
    B = B.contiguous();
    // treats A as (M, K) row-major: the transpose in the reference is forgotten
    const int k = (int)A.size(0), m = (int)A.size(1), n = (int)B.size(1);
    TORCH_CHECK(B.size(0) == k, "inner dimensions differ");
    const int64_t sam = k, sak = 1, sbk = n, sbn = 1, sa = 0, sb = 0, sc = 0;
    auto C = torch::empty({m, n}, A.options());
    if (C.numel() == 0) return C;
    dim3 block(TILE, TILE);
    dim3 grid((n + block.x - 1) / block.x, (m + block.y - 1) / block.y, 1);
    gemm_tiled<<<grid, block>>>(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), m, n, k, sam, sak, sbk, sbn, sa, sb, sc);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "A.T @ B (transpose forgotten)"); }
