// GEMM + bias + ReLU fused in one pass: y[b][o] = max(0, bias[o] + sum_i x[b][i] * w[o][i]).
#include <torch/extension.h>

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), "expected x (B, in), weight (out, in)");
    TORCH_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "expected bias (out)");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int64_t batch = x.size(0), in = x.size(1), out = weight.size(0);
    auto y = torch::empty({batch, out}, x.options());
    const float* px = x.data_ptr<float>();
    const float* pw = weight.data_ptr<float>();
    const float* pb = bias.data_ptr<float>();
    float* py = y.data_ptr<float>();
    for (int64_t r = 0; r < batch; ++r) {
        const float* row_x = px + r * in;
        for (int64_t o = 0; o < out; ++o) {
            const float* row_w = pw + o * in;
            float acc = 0.0f;
            for (int64_t i = 0; i < in; ++i) acc += row_x[i] * row_w[i];
            acc += pb[o];
            py[r * out + o] = acc > 0.0f ? acc : 0.0f;
        }
    }
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "gemm + bias + relu (fused, CPU)"); }
