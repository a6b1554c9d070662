// Square matmul on the CPU: i-k-j order so the inner loop streams rows of B and C, unrolled by 4.
#include <torch/extension.h>

torch::Tensor forward(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "expected (n, k) @ (k, m)");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32, "float32 only");
    a = a.contiguous();
    b = b.contiguous();
    const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
    auto c = torch::zeros({n, m}, a.options());
    const float* pa = a.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* pc = c.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) {
        float* row_c = pc + i * m;
        for (int64_t p = 0; p < k; ++p) {
            const float scale = pa[i * k + p];
            const float* row_b = pb + p * m;
            int64_t j = 0;
            for (; j + 4 <= m; j += 4) {
                row_c[j] += scale * row_b[j];
                row_c[j + 1] += scale * row_b[j + 1];
                row_c[j + 2] += scale * row_b[j + 2];
                row_c[j + 3] += scale * row_b[j + 3];
            }
            for (; j < m; ++j) row_c[j] += scale * row_b[j];
        }
    }
    return c;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "square matmul (i-k-j, unrolled, CPU)"); }
