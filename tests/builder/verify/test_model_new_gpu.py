"""KernelBench ModelNew files that own parameters, judged in-process on CUDA (run on the GPU box): built as the
task's Model is, from the CUDA generator, they are correct without taking anything from the reference; one that
misuses a parameter is incorrect. The CLI runs of the same files are in fixtures.json (cuda/*model_new*)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from builder.tasks import instantiate, load_task_module
from builder.tasks.suite import describe_task_file
from builder.verify.child import checks
from builder.verify.child.main import load_model_new
from builder.verify.child.model_new import build_model_new
from tests.builder.verify import in_process

pytestmark = pytest.mark.gpu

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
TASKS = FIXTURES / "tasks" / "level1"
CANDIDATES = FIXTURES / "candidates" / "cuda"
JOB = {"backend": "cuda", "seeds": [123_456_789, 987_654_321], "trials": 2, "atol": 1e-3, "rtol": 1e-3}
CASES = [  # (fixture, task file, status, parameters given the reference's values)
    ("correct_model_new_own_parameters.py", "1_scale_shift.py", "correct", 0),
    ("correct_model_new_reordered_parameters.py", "1_scale_shift.py", "correct", 2),
    ("correct_model_new_linear.py", "5_linear_relu.py", "correct", 0),
    ("correct_model_new_conv_batchnorm.py", "6_conv2d_batchnorm.py", "correct", 0),
    ("incorrect_model_new_bias_misused.py", "5_linear_relu.py", "incorrect", 0),
]


def task_module(name: str):
    return load_task_module(describe_task_file(TASKS / name))


@pytest.mark.parametrize(("fixture", "task", "status", "adopted"), CASES)
def test_model_new_with_parameters_is_judged_as_kernelbench_judges_it(fixture, task, status, adopted):
    model_class = load_model_new(str(CANDIDATES / fixture))
    result = in_process.evaluate(checks.ModelNewBinding(model_class), task_module(task), JOB)
    assert result["status"] == status, result["error"]
    assert result["reference_state_loaded"] == adopted
    if status == "incorrect":
        assert result["max_diff"] > 0.1
    else:
        assert not {"input_mutation", "ignores_input", "side_stream"} & set(result["flags"]), result["flags"]


def test_model_new_draws_its_parameters_from_the_devices_generator():
    module = task_module("1_scale_shift.py")
    model, _ = instantiate(module, 42, "cuda")
    model_class = load_model_new(str(CANDIDATES / "correct_model_new_own_parameters.py"))
    built = build_model_new(model_class, module, 42, "cuda")
    assert torch.equal(built.weight, model.weight) and torch.equal(built.bias, model.bias)
    torch.manual_seed(42)
    on_host = model_class(*module.get_init_inputs()).to("cuda")  # built on the host and moved: other numbers
    assert not torch.equal(on_host.weight, model.weight)
