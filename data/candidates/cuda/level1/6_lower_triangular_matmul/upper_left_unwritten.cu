// Lower-triangular matmul. Designed to fail: threads above the diagonal return without writing, assuming a zeroed output, but the output comes from torch::empty (uninitialized_output).
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// One thread per output: C[i][j] = sum over k in [j, i] of A[i][k] * B[k][j] below the diagonal, 0 above.
__global__ void tril_matmul_naive(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int n) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= n || col >= n) return;
    if (col > row) return;  // upper triangle: assumed to be zero already
    float acc = 0.0f;
    for (int k = col; k <= row; ++k) acc += a[(size_t)row * n + k] * b[(size_t)k * n + col];
    c[(size_t)row * n + col] = acc;
}

torch::Tensor forward(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "inputs must be CUDA tensors");
    A = A.contiguous();
    B = B.contiguous();
    const int n = (int)A.size(0);
    auto C = torch::empty({n, n}, A.options());
    if (n == 0) return C;
    dim3 block(16, 16), grid((n + 15) / 16, (n + 15) / 16);
    tril_matmul_naive<<<grid, block>>>(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "tril matmul (upper triangle unwritten)"); }
