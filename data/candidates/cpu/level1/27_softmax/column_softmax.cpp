// Normalises over the wrong axis: each column sums to one instead of each row.
#include <torch/extension.h>

#include <cmath>
#include <vector>

torch::Tensor forward(torch::Tensor x) {
    x = x.contiguous();
    const int64_t rows = x.size(0), cols = x.size(1);
    auto out = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    std::vector<float> col_max(cols, -INFINITY), col_sum(cols, 0.0f);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) col_max[c] = std::fmax(col_max[c], in[r * cols + c]);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            o[r * cols + c] = std::exp(in[r * cols + c] - col_max[c]);
            col_sum[c] += o[r * cols + c];
        }
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) o[r * cols + c] /= col_sum[c];
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "softmax over dim 0 (wrong axis)"); }
