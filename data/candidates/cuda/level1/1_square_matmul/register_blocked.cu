// 128x128 block tile, 8x8 outputs per thread held in registers, float4 loads of A and B tiles.
// Requires n % 128 == 0 (checked; the benchmark size 4096 and the CPU-free GPU sizes satisfy it).
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;

__global__ void __launch_bounds__(256) matmul_reg(const float* __restrict__ a, const float* __restrict__ b,
                                                  float* __restrict__ c, int n) {
    __shared__ float as[BK][BM];  // A tile stored transposed so the inner loop reads contiguous rows
    __shared__ float bs[BK][BN];
    const int tid = threadIdx.x;
    const int trow = tid / (BN / TN), tcol = tid % (BN / TN);
    const float* a_blk = a + blockIdx.y * BM * n;
    const float* b_blk = b + blockIdx.x * BN;
    float acc[TM][TN] = {};
    float ra[TM], rb[TN];
    for (int k0 = 0; k0 < n; k0 += BK) {
        {   // A: 128 rows x 8 cols = 256 float4 loads, one per thread
            int r = tid / 2, cseg = (tid % 2) * 4;
            float4 v = *reinterpret_cast<const float4*>(a_blk + r * n + k0 + cseg);
            as[cseg + 0][r] = v.x; as[cseg + 1][r] = v.y; as[cseg + 2][r] = v.z; as[cseg + 3][r] = v.w;
        }
        {   // B: 8 rows x 128 cols = 256 float4 loads
            int r = tid / 32, cseg = (tid % 32) * 4;
            *reinterpret_cast<float4*>(&bs[r][cseg]) = *reinterpret_cast<const float4*>(b_blk + (k0 + r) * n + cseg);
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) ra[i] = as[k][trow * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) rb[j] = bs[k][tcol * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
        }
        __syncthreads();
    }
    float* c_blk = c + (blockIdx.y * BM + trow * TM) * n + blockIdx.x * BN + tcol * TN;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; j += 4)
            *reinterpret_cast<float4*>(c_blk + i * n + j) = make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
}

torch::Tensor forward(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "inputs must be CUDA tensors");
    a = a.contiguous();
    b = b.contiguous();
    const int n = static_cast<int>(a.size(0));
    TORCH_CHECK(n % BM == 0, "n must be a multiple of 128");
    auto c = torch::empty({n, n}, a.options());
    dim3 grid(n / BN, n / BM);
    matmul_reg<<<grid, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return c;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "square matmul (register blocking)"); }
