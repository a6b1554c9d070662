// A @ B.T with B stored (N, K): one thread per output, dot product of an A row with a B row.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// One thread per output element over strided operands (batch index blockIdx.z).
__global__ void gemm_naive(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                           int m, int n, int k, int64_t sam, int64_t sak, int64_t sbk, int64_t sbn,
                           int64_t sa, int64_t sb, int64_t sc) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= m || col >= n) return;
    a += blockIdx.z * sa;
    b += blockIdx.z * sb;
    const float* ar = a + (int64_t)row * sam;
    const float* bc = b + (int64_t)col * sbn;
    float acc = 0.0f;
    for (int kk = 0; kk < k; ++kk) acc += ar[kk * sak] * bc[kk * sbk];
    c[blockIdx.z * sc + (int64_t)row * n + col] = acc;
}

torch::Tensor forward(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32, "float32 only");
    A = A.contiguous();
    B = B.contiguous();
    // B is (N, K): B.T(k, n) = B[n][k]
    const int m = (int)A.size(0), k = (int)A.size(1), n = (int)B.size(0);
    TORCH_CHECK(B.size(1) == k, "inner dimensions differ");
    const int64_t sam = k, sak = 1, sbk = 1, sbn = k, sa = 0, sb = 0, sc = 0;
    auto C = torch::empty({m, n}, A.options());
    if (C.numel() == 0) return C;
    dim3 block(16, 16);
    dim3 grid((n + block.x - 1) / block.x, (m + block.y - 1) / block.y, 1);
    gemm_naive<<<grid, block>>>(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), m, n, k, sam, sak, sbk, sbn, sa, sb, sc);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "A @ B.T (naive)"); }
