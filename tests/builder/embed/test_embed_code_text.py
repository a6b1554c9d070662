from __future__ import annotations

from builder.embed.code_text import (
    chunk_spans,
    code_view,
    device_code,
    embedded_cuda_sources,
    normalised_hash,
    strip_c_comments,
)

SOURCE = """// header comment
#include <torch/extension.h>
#include <cuda_runtime.h>
#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be CUDA")
/* block
   comment */
__global__ void k(const float* x, float* y) { y[0] = x[0]; /* inline */ }
torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "need // cuda (not a comment)");
    CHECK_CUDA(x);
    const char* url = "http://example";  // trailing
    return x;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &forward, "doc");
}
"""


def test_comments_go_strings_stay():
    code = strip_c_comments(SOURCE)
    assert "header comment" not in code and "block" not in code and "inline" not in code and "trailing" not in code
    assert '"http://example"' in code and '"need // cuda (not a comment)"' in code


def test_strings_emptied_except_inline_assembly():
    code = strip_c_comments('x = "float4"; asm volatile("cp.async.wait_all;" ::); /* c */', keep_strings=False)
    assert '"float4"' not in code and '""' in code and '"cp.async.wait_all;"' in code


def test_device_code_drops_boilerplate_keeps_kernel_and_host_logic():
    code = device_code(SOURCE, "cuda")
    for gone in ("#include", "TORCH_CHECK", "CHECK_CUDA", "PYBIND11_MODULE", "m.def", "comment"):
        assert gone not in code, gone
    assert "__global__ void k" in code and "return x;" in code and 'const char* url = "http://example";' in code


def test_python_candidate_inline_sources():
    source = 'import torch\n# note\ncuda = """\n__global__ void k() {} // c\n"""\nx = 1 // 2\n'
    assert embedded_cuda_sources(source) == ["\n__global__ void k() {} // c\n"]
    assert code_view(source, "python").strip() == "__global__ void k() {}"
    plain = "x = 7 // 2  # floor division is not a comment\n"
    assert code_view(plain, "python").strip() == "x = 7 // 2"


def test_normalised_hash_ignores_comments_and_whitespace_only():
    a = "__global__ void k(float* x) { x[0] = 1; }"
    b = "// a comment\n__global__   void k(float* x)\n{\n  x[0] = 1;  /* same */\n}\n"
    assert normalised_hash(a, "cuda") == normalised_hash(b, "cuda")
    assert normalised_hash(a, "cuda") != normalised_hash(a.replace("1", "2"), "cuda")


def test_chunk_spans_cover_with_overlap():
    spans = chunk_spans(1000, window=254, overlap=32, max_chunks=16)
    assert spans[0] == (0, 254) and spans[-1] == (746, 1000)
    assert all(end - start == 254 for start, end in spans)
    assert all(b[0] < a[1] and a[1] - b[0] >= 32 for a, b in zip(spans, spans[1:], strict=False))
    assert chunk_spans(100, 254, 32, 16) == [(0, 100)]


def test_chunk_spans_cap_keeps_first_and_last():
    spans = chunk_spans(100_000, window=254, overlap=32, max_chunks=4)
    assert len(spans) == 4 and spans[0][0] == 0 and spans[-1][1] == 100_000
