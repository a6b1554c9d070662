"""What the kernel page states beside a speedup: dtype and shapes read from the reference, and a compile
error's own message first."""

from __future__ import annotations

from pathlib import Path

from explorer.kernel_facts import first_error_line, reference_facts, shorten_paths

TASKS = Path(__file__).resolve().parents[2] / "data" / "tasks"

BUILD_ERROR = (
    "RuntimeError: Error building extension 'ka_caf97a0a3a3895bf': [1/2] /usr/local/cuda/bin/nvcc -MD -MF "
    "ka_caf97a0a3a3895bf.cuda.o.d -isystem /opt/torch/.venv/lib/python3.12/site-packages/torch/include -O3 -c "
    "/opt/ka-cache/builds/caf97a0a3a3895bf/ka_caf97a0a3a3895bf/ka_caf97a0a3a3895bf.cu -o x.cuda.o\n"
    "FAILED: ka_caf97a0a3a3895bf.cuda.o\n"
    '/opt/ka-cache/builds/caf97a0a3a3895bf/ka_caf97a0a3a3895bf/ka_caf97a0a3a3895bf.cu(11): error: identifier "TILE" '
    "is undefined\n"
    '1 error detected in the compilation of "/opt/ka-cache/builds/caf97a0a3a3895bf/ka_caf97a0a3a3895bf/x.cu".\n'
)


def test_the_compilers_message_comes_first_with_paths_shortened():
    assert first_error_line(BUILD_ERROR) == 'ka_caf97a0a3a3895bf.cu(11): error: identifier "TILE" is undefined'
    assert first_error_line("x.cpp:3:5: error: expected ';' before '}' token\n") == (
        "x.cpp:3:5: error: expected ';' before '}' token"
    )
    runtime = "AcceleratorError: CUDA error: invalid argument\nSearch for `cudaErrorInvalidValue' in the docs"
    assert first_error_line(runtime) == "AcceleratorError: CUDA error: invalid argument"
    assert first_error_line("killed after 300 s") == "killed after 300 s"
    assert first_error_line(None) is None and first_error_line(" \n ") is None
    assert "/opt/ka-cache" not in shorten_paths(BUILD_ERROR) and "x.cu" in shorten_paths(BUILD_ERROR)


def test_dtype_and_input_shapes_from_the_reference_without_running_it():
    facts = reference_facts((TASKS / "level1" / "10_conv2d_strided_asymmetric.py").read_text())
    assert facts == {"dtype": "float32", "shapes": ["16×32×256×256"]}
    code = (
        "import torch\nDTYPE = 'float16'\nN = 2 ** 10\nB = N // 4\n"
        "def get_inputs():\n    m = N * 2\n    return [torch.randn(B, m), torch.rand((3, N)), "
        "torch.randint(0, 10, (B,)), some_call()]\n"
    )
    assert reference_facts(code) == {"dtype": "float16", "shapes": ["256×2048", "3×1024", "256"]}
    assert reference_facts("def get_inputs(:") == {"dtype": None, "shapes": []}
    assert reference_facts(None) == {"dtype": None, "shapes": []}
    # Nothing is executed: a call that would have side effects is just not a shape.
    assert reference_facts("import os\nDTYPE = os.system('false')\ndef get_inputs():\n    return [open('x')]\n") == {
        "dtype": None,
        "shapes": [],
    }
