// Takes a 3-D accessor of the 2-D input: compiles, then throws at run time on every call.
#include <torch/extension.h>

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    auto xa = x.accessor<float, 3>();
    auto wa = weight.accessor<float, 2>();
    auto ba = bias.accessor<float, 1>();
    const int64_t batch = x.size(0), in = x.size(1), out = weight.size(0);
    auto y = torch::empty({batch, out}, x.options());
    auto ya = y.accessor<float, 2>();
    for (int64_t r = 0; r < batch; ++r)
        for (int64_t o = 0; o < out; ++o) {
            float acc = ba[o];
            for (int64_t i = 0; i < in; ++i) acc += xa[r][i][0] * wa[o][i];
            ya[r][o] = acc > 0.0f ? acc : 0.0f;
        }
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "gemm + bias + relu (wrong accessor rank)"); }
