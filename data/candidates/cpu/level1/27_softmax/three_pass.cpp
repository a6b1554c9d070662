// Row softmax on the CPU: max pass, exp-and-sum pass, normalise pass.
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
        float* orow = o + r * cols;
        float row_max = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) row_max = std::fmax(row_max, row[c]);
        float sum = 0.0f;
        for (int64_t c = 0; c < cols; ++c) {
            orow[c] = std::exp(row[c] - row_max);
            sum += orow[c];
        }
        const float inv = 1.0f / sum;
        for (int64_t c = 0; c < cols; ++c) orow[c] *= inv;
    }
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "softmax (three passes, CPU)"); }
