"""static_scan.scan: torch-op and host-side-effect detection from source text, with comments and string
literals never triggering, and honest kernels never flagged."""

from __future__ import annotations

import pytest

from builder.verify.static_scan import scan, strip_comments_and_strings

KERNEL = """
#include <torch/extension.h>
__global__ void k(const float* x, float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = x[i] * 2.f; }
torch::Tensor forward(torch::Tensor x) {
    auto y = torch::empty_like(x);
    auto z = torch::zeros({4}, x.options());
    k<<<1, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y.view({-1}).reshape(x.sizes());
}
"""


def with_body(line: str) -> str:
    return KERNEL.replace("    return y", f"    {line}\n    return y")


def test_honest_kernel_has_no_flags():
    assert scan(KERNEL, "cuda") == set()


@pytest.mark.parametrize(
    "line",
    [
        "auto r = at::matmul(x, x);",
        "auto r = torch::mm(x, x);",
        "auto r = at::conv2d(x, x);",
        "auto r = x.matmul(x);",
        "auto r = torch::nn::functional::relu(x);",
        "cublasSgemm(handle, op, op, 1, 1, 1, &a, p, 1, p, 1, &b, p, 1);",
        "cudnnConvolutionForward(h);",
        "auto r = at::addmm(x, x, x);",
    ],
)
def test_library_compute_is_uses_torch_ops(line):
    assert scan(with_body(line), "cuda") == {"uses_torch_ops"}


def test_torch_glue_without_any_own_work_is_uses_torch_ops():
    source = "#include <torch/extension.h>\ntorch::Tensor forward(torch::Tensor x) { return torch::relu(x) + 1; }"
    assert scan(source, "cpp") == {"uses_torch_ops"}


def test_light_glue_next_to_an_own_kernel_is_fine():
    assert scan(with_body("y = torch::relu(y);"), "cuda") == set()


@pytest.mark.parametrize(
    "line",
    [
        'const char* t = std::getenv("HF_TOKEN");',
        'const char* t = getenv("HOME");',
        'std::system("curl example.com");',
        'FILE* f = fopen("/proc/self/maps", "r");',
        'std::ofstream out("leak.txt");',
        "std::thread worker([]{});",
        "pthread_create(&t, nullptr, run, nullptr);",
        "auto fut = std::async([]{ return 1; });",
        "pid_t p = fork();",
        'execvp("sh", argv);',
        "int s = socket(AF_INET, SOCK_STREAM, 0);",
        'int fd = open("/etc/passwd", 0);',
        "setenv(name, value, 1);",
        "char** e = environ;",
        'FILE* p = popen("ls", "r");',
    ],
)
def test_host_side_effects(line):
    assert "host_side_effects" in scan(with_body(line), "cuda")


@pytest.mark.parametrize(
    "line",
    [
        '// at::matmul(x, x); std::system("rm -rf /"); getenv("HF_TOKEN");',
        '/* fopen("x", "w"); std::thread t; at::conv2d(x, w); */',
        'const char* doc = "calls at::matmul( and system( and fopen(";',
        'const char* raw = R"doc(std::getenv("X") at::mm(a, b))doc";',
        'char q = \'"\'; // getenv("HOME")',
        "std::vector<int> v{3, 1, 2}; v.erase(std::remove(v.begin(), v.end(), 1), v.end());",
        "auto b = std::bind(f, 1);",
        "int systematic(int a); int environment_size = 3;",
    ],
)
def test_comments_strings_and_lookalikes_do_not_trigger(line):
    assert scan(with_body(line), "cuda") == set()


def test_stripping_keeps_line_numbers_and_code():
    source = 'int a; // c1\n/* c2\n c3 */ const char* s = "x\\"y";\nint b;'
    stripped = strip_comments_and_strings(source)
    assert stripped.count("\n") == source.count("\n")
    assert "int a;" in stripped and "int b;" in stripped and "c2" not in stripped and "x" not in stripped


PY_OWN_KERNEL = """
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="scale", cpp_sources="...", functions=["matmul"])


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n))
        self.ext = ext

    def forward(self, a, b):
        out = torch.empty_like(a)
        return self.ext.matmul(a, b)
"""


def test_python_model_new_with_own_extension_is_clean():
    assert scan(PY_OWN_KERNEL, "python") == set()


@pytest.mark.parametrize(
    ("snippet", "flag"),
    [
        ("return torch.matmul(a, b)", "uses_torch_ops"),
        ("return a @ b", "uses_torch_ops"),
        ("return torch.nn.functional.linear(a, b)", "uses_torch_ops"),
        ("import subprocess; subprocess.run(['ls'])", "host_side_effects"),
        ("import os; os.system('ls')", "host_side_effects"),
        ("import os; token = os.environ.get('HF_TOKEN')", "host_side_effects"),
        ("open('/tmp/x', 'w').write('x')", "host_side_effects"),
        ("import socket", "host_side_effects"),
        ("import threading; threading.Thread(target=print).start()", "host_side_effects"),
    ],
)
def test_python_flags(snippet, flag):
    source = PY_OWN_KERNEL.replace("        return self.ext.matmul(a, b)", f"        {snippet}\n        return out")
    assert flag in scan(source, "python")


def test_python_without_own_kernel_doing_torch_compute_is_flagged():
    source = "import torch\nclass ModelNew:\n    def forward(self, x):\n        return torch.relu(x)\n"
    assert scan(source, "python") == {"uses_torch_ops"}


def test_python_syntax_error_yields_no_flags():
    assert scan("def broken(:\n", "python") == set()
