// Naive matmul whose row loop stops one short: the last output row is never written and keeps whatever
// torch::empty handed out.
#include <torch/extension.h>

torch::Tensor forward(torch::Tensor a, torch::Tensor b) {
    a = a.contiguous();
    b = b.contiguous();
    const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
    auto c = torch::empty({n, m}, a.options());
    const float* pa = a.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* pc = c.data_ptr<float>();
    for (int64_t i = 0; i < n - 1; ++i) {
        for (int64_t j = 0; j < m; ++j) {
            float acc = 0.0f;
            for (int64_t p = 0; p < k; ++p) acc += pa[i * k + p] * pb[p * m + j];
            pc[i * m + j] = acc;
        }
    }
    return c;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "square matmul (last row unwritten)"); }
