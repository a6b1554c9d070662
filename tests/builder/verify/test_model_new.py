"""A KernelBench ModelNew is built as its task's Model is (seed, init inputs, device context, host fallback) and
given the reference's values by name; the checks that read its state still hold (CPU; `meta` stands in for a
device whose generator differs from the host's)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn

from builder.tasks import instantiate, load_task_module
from builder.tasks.loading import construction_device
from builder.tasks.suite import describe_task_file
from builder.verify.child import checks
from builder.verify.child.main import load_model_new
from builder.verify.child.model_new import adopt_reference_state
from builder.verify.judge import verdict
from tests.builder.verify import in_process

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
TASKS = FIXTURES / "tasks" / "level1"
CANDIDATES = FIXTURES / "candidates" / "python"
SEEDS = [9_141_592_653, 2_718_281_828, 1_618_033_988]
SEED = SEEDS[0]


def task_module(path: Path):
    return load_task_module(describe_task_file(path))


@pytest.fixture(scope="module")
def scale_shift():
    return task_module(TASKS / "1_scale_shift.py")


def job(**overrides):
    return {"backend": "cpu", "seeds": SEEDS, "trials": 3, "atol": 1e-4, "rtol": 1e-4, "profile": False, **overrides}


class RecordsWhereItWasBuilt(nn.Module):
    """ModelNew for 1_scale_shift that notes the default device its constructor ran under and its own draws."""

    def __init__(self, cols):
        super().__init__()
        self.built_on = torch.empty(0).device.type
        self.weight = nn.Parameter(torch.randn(cols))
        self.bias = nn.Parameter(torch.randn(cols))
        self.drawn = self.weight.detach().clone()  # not state: stays where it was made

    def forward(self, x):
        return x * self.weight + self.bias


def test_model_new_is_built_inside_the_models_device_context(scale_shift):
    model, _ = instantiate(scale_shift, SEED, "meta")
    assert model.weight.is_meta and construction_device(scale_shift, "meta") == "meta"
    bound = checks.ModelNewBinding(RecordsWhereItWasBuilt).bind(model, scale_shift, SEED, "meta")
    assert bound.call.module.built_on == "meta"  # not built on the host and moved: another generator's numbers
    assert bound.call.module.weight.is_meta and not bound.call.module.training


HOST_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.weight = nn.Parameter(torch.from_numpy(torch.randn(cols).numpy() * 2.0))
        self.bias = nn.Parameter(torch.randn(cols))

    def forward(self, x):
        return x * self.weight + self.bias


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return [16]
"""


def test_model_new_of_a_task_built_on_the_host_is_built_on_the_host(tmp_path):
    path = tmp_path / "level1" / "1_host_built.py"
    path.parent.mkdir()
    path.write_text(HOST_TASK)
    module = task_module(path)
    instantiate(module, SEED, "meta")  # .numpy() cannot run on meta: the Model is built on the host and moved
    assert construction_device(module, "meta") == "cpu"
    bound = checks.ModelNewBinding(RecordsWhereItWasBuilt).bind(
        instantiate(module, SEED, "meta")[0], module, SEED, "meta"
    )
    assert bound.call.module.built_on == "cpu" and bound.call.module.weight.is_meta
    torch.manual_seed(SEED)
    expected = torch.randn(16)  # the Model's first draw, from the host's generator
    assert torch.equal(bound.call.module.drawn, expected)


def test_reference_state_is_adopted_by_name_and_shape_only():
    reference = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    candidate = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(5))
    with torch.no_grad():
        reference[1].running_mean.fill_(0.5)
        candidate[0].bias.copy_(reference[0].bias)
    changed = adopt_reference_state(candidate, reference)
    assert changed == ["0.weight"]  # the bias already held the value; the batch norm's shapes differ
    assert torch.equal(candidate[0].weight, reference[0].weight)
    assert torch.equal(candidate[1].running_mean, torch.zeros(5))
    assert adopt_reference_state(object(), reference) == []


def test_parameters_made_in_another_order_are_given_the_references_values(scale_shift):
    model_class = load_model_new(str(CANDIDATES / "correct_model_new_reordered_parameters.py"))
    result = in_process.evaluate(checks.ModelNewBinding(model_class), scale_shift, job())
    assert result["status"] == "correct", result["error"]
    assert result["reference_state_loaded"] == 2
    assert "ignores_input" not in result["flags"] and "input_mutation" not in result["flags"]


def test_model_new_built_as_its_model_takes_nothing_from_the_reference(scale_shift):
    model_class = load_model_new(str(CANDIDATES / "correct_model_new_own_parameters.py"))
    result = in_process.evaluate(checks.ModelNewBinding(model_class), scale_shift, job())
    assert result["status"] == "correct", result["error"]
    assert result["reference_state_loaded"] == 0


class ScalesItsWeightInForward(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(cols))
        self.weight = nn.Parameter(torch.randn(cols))

    def forward(self, x):
        out = x * self.weight + self.bias
        self.weight.mul_(1.0001)
        return out


class ComputesFromACopy(nn.Module):
    """Keeps a copy of its weight made in __init__ and never reads the parameter: its output ignores it."""

    def __init__(self, cols):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(cols))
        self.bias = nn.Parameter(torch.randn(cols))
        self.register_buffer("frozen", self.weight.detach().clone())

    def forward(self, x):
        return x * self.frozen + self.bias


def test_adopted_state_leaves_the_parameter_mutation_check_whole(scale_shift):
    result = in_process.evaluate(checks.ModelNewBinding(ScalesItsWeightInForward), scale_shift, job())
    assert result["status"] == "incorrect"
    assert "input_mutation" in result["flags"] and "parameter weight" in result["flag_notes"]["input_mutation"]


def test_adopted_state_leaves_the_ignored_parameter_check_whole(scale_shift):
    result = in_process.evaluate(checks.ModelNewBinding(ComputesFromACopy), scale_shift, job())
    assert result["status"] == "incorrect"
    assert "ignores_input" in result["flags"], result


def test_a_failing_constructor_is_the_candidates_failure(scale_shift):
    class Raises(nn.Module):
        def __init__(self, cols):
            raise ValueError("no parameters today")

    result = in_process.evaluate(checks.ModelNewBinding(Raises), scale_shift, job())
    assert result["status"] == "runtime_error" and "no parameters today" in result["error"]


def test_the_record_carries_how_much_state_was_adopted():
    from builder.candidates import Candidate

    task = describe_task_file(TASKS / "1_scale_shift.py", level=1, number=1)
    candidate = Candidate(task_id=task.id, source="class ModelNew: pass\n", language="python", kernel_name="k")
    base = verdict.base_fields(candidate, task, "cpu")
    record = verdict.assemble_record(base, status="correct", result={"flags": [], "reference_state_loaded": 2})
    assert record.reference_state_loaded == 2
    record = verdict.assemble_record(base, status="correct", result={"flags": [], "reference_state_loaded": "2"})
    assert record.reference_state_loaded is None  # the child's claim, type-checked
    record = verdict.assemble_record(base, status="correct", result={"flags": [], "reference_state_loaded": -1})
    assert record.reference_state_loaded is None


class NotesItsPrecision(RecordsWhereItWasBuilt):
    def forward(self, x):
        self.seen = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction)
        return super().forward(x)


def test_model_new_is_called_at_its_references_numeric_settings(scale_shift, monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)  # PyTorch's default, which eager is timed with
    model, inputs = instantiate(scale_shift, SEED, "cpu")
    bound = checks.ModelNewBinding(NotesItsPrecision).bind(model, scale_shift, SEED, "cpu")
    bound.call(*inputs)
    assert bound.call.module.seen == (False, False)  # as the clean reference was computed
    assert torch.backends.cudnn.allow_tf32  # and put back
