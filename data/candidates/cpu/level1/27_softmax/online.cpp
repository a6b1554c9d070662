// Row softmax with the online max/sum recurrence: one read pass for both statistics, one write pass.
#include <torch/extension.h>

#include <cmath>

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "expected a float32 (batch, dim) matrix");
    x = x.contiguous();
    const int64_t rows = x.size(0), cols = x.size(1);
    auto out = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = in + r * cols;
        float running_max = -INFINITY;
        float running_sum = 0.0f;
        for (int64_t c = 0; c < cols; ++c) {
            const float v = row[c];
            if (v > running_max) {
                running_sum = running_sum * std::exp(running_max - v) + 1.0f;
                running_max = v;
            } else {
                running_sum += std::exp(v - running_max);
            }
        }
        const float inv = 1.0f / running_sum;
        for (int64_t c = 0; c < cols; ++c) o[r * cols + c] = std::exp(row[c] - running_max) * inv;
    }
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "softmax (online max/sum, CPU)"); }
