// Lower-triangular matmul with 32x32 tiles that skip tiles above the diagonal and K tiles outside [j0, i1].
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

constexpr int TILE = 32;

// C = tril(tril(A) @ tril(B)): C[i][j] = sum_{k=j..i} A[i][k] * B[k][j] for j <= i, else 0.
// Blocks entirely above the diagonal only write zeros; others only visit K tiles overlapping [j0, i1].
__global__ void tril_matmul_tiled(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int n) {
    __shared__ float as[TILE][TILE];
    __shared__ float bs[TILE][TILE + 1];
    const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
    const int row = row0 + threadIdx.y, col = col0 + threadIdx.x;
    if (col0 > row0 + TILE - 1) {  // whole tile above the diagonal
        if (row < n && col < n) c[(size_t)row * n + col] = 0.0f;
        return;
    }
    float acc = 0.0f;
    const int k_begin = (col0 / TILE) * TILE;
    const int k_end = min(row0 + TILE, n);
    for (int t = k_begin; t < k_end; t += TILE) {
        const int ka = t + threadIdx.x, kb = t + threadIdx.y;
        as[threadIdx.y][threadIdx.x] = (row < n && ka < n && ka <= row) ? a[(size_t)row * n + ka] : 0.0f;
        bs[threadIdx.y][threadIdx.x] = (col < n && kb < n && col <= kb) ? b[(size_t)kb * n + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) acc += as[threadIdx.y][kk] * bs[kk][threadIdx.x];
        __syncthreads();
    }
    if (row < n && col < n) c[(size_t)row * n + col] = (col <= row) ? acc : 0.0f;
}

torch::Tensor forward(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "inputs must be CUDA tensors");
    A = A.contiguous();
    B = B.contiguous();
    const int n = (int)A.size(0);
    auto C = torch::empty({n, n}, A.options());
    if (n == 0) return C;
    dim3 block(TILE, TILE), grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE);
    tril_matmul_tiled<<<grid, block>>>(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "tril matmul (tiled)"); }
