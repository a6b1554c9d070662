"""Code extraction from chat responses."""

from __future__ import annotations

from builder.generate.llm.extraction import extract_kernel, extract_python, fenced_blocks, unusable_source

KERNEL = (
    "#include <torch/extension.h>\n"
    "torch::Tensor forward(torch::Tensor x) { return x.clone(); }\n"
    'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "copy"); }\n'
)


def test_tagged_and_untagged_fences():
    for tag in ("cuda", "cpp", "c++", ""):
        text = f"Sure! Here you go:\n\n```{tag}\n{KERNEL}```\nHope this helps."
        assert extract_kernel(text).code == KERNEL


def test_tilde_fences_and_indented_fences():
    assert extract_kernel(f"~~~cpp\n{KERNEL}~~~\n").code == KERNEL
    assert extract_kernel(f"Steps:\n  ```cuda\n{KERNEL}  ```\n").code == KERNEL


def test_the_block_with_the_binding_wins_over_others():
    setup = "```python\nfrom setuptools import setup\nsetup(name='x')\n```\n"
    header = "```cpp\n#include <cuda.h>\n__global__ void k();\n```\n"
    bench = "```python\nimport torch\nprint(torch.randn(3))\n```\n"
    text = f"First the setup:\n{setup}Header:\n{header}The kernel:\n```cuda\n{KERNEL}```\nTest:\n{bench}"
    assert extract_kernel(text).code == KERNEL


def test_unclosed_final_block_is_taken_to_the_end():
    text = f"```cuda\n{KERNEL}"  # cut by the token limit after the code
    assert extract_kernel(text).code == KERNEL
    blocks = fenced_blocks(text)
    assert len(blocks) == 1 and not blocks[0].closed


def test_unfenced_code_with_prose_around():
    text = f"Explanation first.\n{KERNEL}\nThat is all; the PYBIND11 part binds forward."
    assert extract_kernel(text).code.strip() == KERNEL.strip()


def test_no_usable_code_gives_a_reason():
    assert extract_kernel("").reason == "empty response"
    assert extract_kernel("I cannot help with that.").reason == "no code block in the response"
    assert extract_kernel("```python\nprint(1)\n```").reason == "no block defines forward() or PYBIND11_MODULE"


def test_unusable_source_keeps_the_raw_response_and_fails_compilation():
    raw = 'prose with */ a comment end and "quotes"'
    source = unusable_source(raw, 'no "code"', "cuda")
    assert source.startswith("#error \"no usable code in the LLM response: no 'code'\"")
    assert "prose with * / a comment end" in source
    assert source.count("*/") == 1 and source.rstrip().endswith("*/")


def test_python_extraction_for_functional_forms():
    code = "def module_fn(x):\n    return x\n\nclass Model:\n    pass\n"
    assert extract_python(f"```python\n{code}```").code == code
    assert extract_python(f"```py\nimport os\n```\n```\n{code}```").code == code
    assert extract_python("```python\nprint(1)\n```").code is None
