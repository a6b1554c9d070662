"""static_scan.scan: torch-op and host-side-effect detection from source text, with comments and string
literals never triggering, and honest kernels never flagged."""

from __future__ import annotations

import pytest

from builder.verify.judge.source_text import strip_comments_and_strings
from builder.verify.judge.static_scan import scan, scan_notes

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


@pytest.mark.parametrize(
    "body", ["return x * self.weight + self.bias", "y = x.clone(); y *= 2; return y", "return -x[:, 1:]"]
)
def test_python_without_own_kernel_doing_tensor_arithmetic_is_flagged(body):
    """Operators on tensors are torch ops: with no kernel of its own, the candidate's work is PyTorch's (the
    child's CPU census alone is a timing share that a loaded machine can push under its threshold)."""
    source = f"import torch\nclass ModelNew:\n    def forward(self, x):\n        {body}\n"
    notes = scan_notes(source, "python")
    assert set(notes) == {"uses_torch_ops"} and "torch's operators" in notes["uses_torch_ops"], notes


@pytest.mark.parametrize(
    "body",
    ["return torch.zeros(x.shape[0] * 2)", "n = x.numel() - 1; return torch.full_like(x, n)", "return 2 * 3"],
)
def test_python_shape_arithmetic_is_not_tensor_compute(body):
    source = f"import torch\nclass ModelNew:\n    def forward(self, x):\n        {body}\n"
    assert scan(source, "python") == set()


def test_python_syntax_error_yields_no_flags():
    assert scan("def broken(:\n", "python") == set()


@pytest.mark.parametrize(
    "line",
    [
        "auto r = at::cpu::mm(x, x);",
        "auto r = at::cuda::tanh(x);",
        "auto r = at :: cpu :: mm(x, x);",
        "using at::cpu::mm;",
        "auto f = &at::cpu::addmm;",
        "auto r = at::native::tanh(x);",
        "auto r = at::compositeexplicitautograd::linear(x, x);",
        "auto r = at::_ops::mm::call(x, x);",
        "auto r = at::_ops::tanh::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), x);",
        "auto r = at::_ops::relu::typed_handle();",
        "auto r = at::redispatch::relu(c10::DispatchKeySet(c10::DispatchKey::CPU), x);",
        "auto r = at::cpu::m\\\nm(x, x);",  # a continued line: the compiler reads mm
        "at::cuda::blas::gemm<float>('n', 'n', 1, 1, 1, 1.f, p, 1, p, 1, 0.f, p, 1);",
        "auto h = at::cuda::getCurrentCUDABlasHandle();",
        "cufftExecC2C(plan, a, b, CUFFT_FORWARD);",
        "cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.f, p, 1, p, 1, 0.f, p, 1);",
        'void* f = dlsym(RTLD_DEFAULT, "name");',
        'auto torch_module = pybind11::module_::import("torch");',
        'auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::mm", "");',
    ],
)
def test_library_past_the_dispatcher_is_uses_torch_ops_whatever_else_the_file_does(line):
    notes = scan_notes(with_body(line), "cuda")
    assert "uses_torch_ops" in notes and notes["uses_torch_ops"].startswith("source calls")


@pytest.mark.parametrize(
    "line",
    [
        "auto props = at::cuda::getCurrentDeviceProperties();",
        "auto stream = at::cuda::getCurrentCUDAStream();",
        "bool avx = at::cpu::is_avx2_supported();",
        "auto e = at::cuda::empty({4}, x.options());",
        "auto r = at::_ops::empty_like::call(x, {}, {}, {}, {}, {});",
        "cuda::std::array<int, 2> a{}; int m = cuda::std::max(1, 2); auto s = cuda::maximum<>{}(1, 2);",
        "auto r = at::_ops::tanh::call(x);",  # through the dispatcher and light: glue beside an own kernel
    ],
)
def test_helpers_in_the_same_namespaces_are_not_library_use(line):
    assert scan(with_body(line), "cuda") == set()


def test_notes_say_what_showed_a_flag():
    notes = scan_notes(with_body("auto r = at::matmul(x, x); const char* h = getenv(n);"), "cuda")
    assert notes == {"uses_torch_ops": "source calls at::matmul", "host_side_effects": "source calls getenv"}


PY_PLAIN = """
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="k", cpp_sources=CPP, functions=["forward"])


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.forward(a, b)
"""


@pytest.mark.parametrize(
    "change",
    [
        "import torch as T\n__BODY__return T.mm(a, b)",
        "from torch import mm as product\n__BODY__return product(a, b)",
        "from torch.nn.functional import linear\n__BODY__return linear(a, b)",
        "import torch.nn.functional as G\n__BODY__return G.conv2d(a, b)",
        "MM = torch.mm\n__BODY__return MM(a, b)",
        "__BODY__self.op = getattr(torch, 'm' + 'm')\n        return self.op(a, b)",
        "__BODY__return getattr(torch, 'matmul')(a, b)",
        "__BODY__name = 'mm'\n        return getattr(torch, name)(a, b)",
        "__BODY__return torch.ops.aten.mm.default(a, b)",
        "import functools\n__BODY__return functools.partial(torch.mm, a)(b)",
        "__BODY__return a.__matmul__(b)",
        "t = __import__('torch')\n__BODY__return t.mm(a, b)",
        "from torch import *\n__BODY__return mm(a, b)",
        'CPP = "torch::Tensor forward(torch::Tensor a, torch::Tensor b) { return at::cpu::mm(a, b); }"\n__BODY__'
        "return ext.forward(a, b)",
    ],
)
def test_python_torch_calls_are_seen_through_aliases_getattr_and_strings(change):
    head, body = change.split("__BODY__")
    source = PY_PLAIN.replace("from torch.utils", head + "\nfrom torch.utils")
    source = source.replace("        return ext.forward(a, b)", "        " + body)
    assert "uses_torch_ops" in scan_notes(source, "python"), source


def test_python_light_torch_call_by_alias_without_own_kernel_is_flagged():
    source = "import torch as T\nclass ModelNew:\n    def forward(self, x):\n        return T.tanh(x)\n"
    assert scan_notes(source, "python") == {"uses_torch_ops": "source has no kernel of its own and calls torch.tanh"}


@pytest.mark.parametrize(
    "change",
    [
        '__BODY__"""A docstring that mentions at::cpu::mm(a, b)."""\n        return ext.forward(a, b)',
        "import torch as T\n__BODY__out = T.empty_like(a)\n        return ext.forward(a, out)",
        "__BODY__torch.backends.cudnn.allow_tf32 = False\n        return ext.forward(a, getattr(torch, 'float32'))",
        'CPP = "torch::Tensor forward(torch::Tensor a) { auto o = torch::empty_like(a); return o; }"\n__BODY__'
        "return ext.forward(a, b)",
    ],
)
def test_python_honest_aliases_and_strings_stay_clean(change):
    head, body = change.split("__BODY__")
    source = PY_PLAIN.replace("from torch.utils", head + "\nfrom torch.utils")
    source = source.replace("        return ext.forward(a, b)", "        " + body)
    assert scan_notes(source, "python") == {}, source


def test_every_bundled_candidate_and_fixture_keeps_its_source_flags():
    """The source scan's flags of the bundled corpus are within what each candidate declares (its manifest's
    flags), and of each adversarial fixture within what fixtures.json allows."""
    import json
    from pathlib import Path

    from builder.generate.bundled import tomllib

    repo = Path(__file__).resolve().parents[3]
    language = {".cu": "cuda", ".cpp": "cpp", ".py": "python"}
    for manifest in (repo / "data" / "candidates").rglob("candidates.toml"):
        for entry in tomllib.loads(manifest.read_text())["candidate"]:
            path = manifest.parent / entry["file"]
            assert scan(path.read_text(), language[path.suffix]) <= set(entry.get("flags", [])), path
    fixtures = repo / "tests" / "fixtures" / "candidates"
    for name, spec in json.loads((fixtures / "fixtures.json").read_text())["fixtures"].items():
        allowed = set(spec["flags"]) | set(spec.get("flags_any", [])) | set(spec.get("optional_flags", []))
        path = fixtures / name
        assert scan(path.read_text(), language[path.suffix]) <= allowed, name
