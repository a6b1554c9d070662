"""Every built-in task, at CPU size: module form == functional form (== the standard nn layer where
one exists), deterministic inputs under a seed, every argument used, and a reference output that a
lazy kernel could not match."""

from __future__ import annotations

import ast
import functools
import inspect
import re

import pytest
import torch

from builder import config
from builder.tasks import instantiate, load_suite, load_task_module

from .nn_equivalents import NN_EQUIVALENTS, NO_STANDARD_LAYER, nn_equivalent
from .output_checks import degeneracy_problems

SUITE = load_suite()
TASKS = SUITE.tasks
MIN_TASKS_PER_LEVEL = {1: 30, 2: 20, 3: 8}
SEED = 1234
OTHER_SEED = 4321


def _key(task) -> str:
    return f"level{task.level}/{task.name}"


@functools.cache
def _prepared(task_id: str):
    """(task, module, model, init_inputs, inputs, reference output) at CPU size, built once per test session."""
    task = SUITE.get(task_id)
    module = load_task_module(task, size="cpu")
    model, inputs = instantiate(module, SEED)
    init_inputs = module.get_init_inputs()
    with torch.no_grad():
        reference = model(*inputs)
    return task, module, model, init_inputs, inputs, reference


def _gathered_arguments(module, model, inputs) -> tuple[list[str], list[torch.Tensor]]:
    """module_fn's parameter names after the inputs, and the model tensors of those names."""
    names = list(inspect.signature(module.module_fn).parameters)[len(inputs) :]
    return names, [getattr(model, name) for name in names]


def _perturbed(value: torch.Tensor) -> torch.Tensor:
    generator = torch.Generator().manual_seed(7)
    if value.is_floating_point():
        noise = torch.rand(value.shape, generator=generator, dtype=value.dtype)
        # Relative and absolute at once: scales entries (keeps variances positive) and moves ~0 entries.
        scale = value.abs().mean()
        return value * (1.0 + config.TASK_PERTURBATION * noise) + config.TASK_PERTURBATION * noise * scale
    return torch.roll(value, shifts=1, dims=0)  # integer inputs (class targets): another valid assignment


ids = [t.id for t in TASKS]


def test_suite_size_and_numbering():
    per_level: dict[int, list[int]] = {}
    for task in TASKS:
        per_level.setdefault(task.level, []).append(task.number)
    assert sorted(per_level) == [1, 2, 3]
    for level, minimum in MIN_TASKS_PER_LEVEL.items():
        numbers = sorted(per_level[level])
        assert len(numbers) >= minimum, f"level {level}: {len(numbers)} tasks"
        assert numbers == list(range(1, len(numbers) + 1)), f"level {level} numbering is not contiguous"
    assert len(TASKS) >= 58
    names = [t.name for t in TASKS]
    assert len(set(names)) == len(names), "task names repeat"


def test_every_task_is_classified_for_the_nn_comparison():
    keys = {_key(t) for t in TASKS}
    assert not set(NN_EQUIVALENTS) & NO_STANDARD_LAYER
    assert set(NN_EQUIVALENTS) | NO_STANDARD_LAYER == keys, "classify new tasks in nn_equivalents.py"


@pytest.mark.parametrize("task_id", ids)
def test_metadata_is_literal_and_complete(task_id):
    task = SUITE.get(task_id)
    assert re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)*", task.name)
    tree = ast.parse(task.source)
    assigned = {n.targets[0].id for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)}
    assert {"OP_CATEGORY", "DTYPE"} <= assigned, "OP_CATEGORY and DTYPE must be written in the file"
    assert task.has_functional
    assert task.dtype in config.TOLERANCES
    assert ast.get_docstring(tree), "a task file starts with a docstring saying what it computes"
    if task.tolerance is not None:
        assert set(task.tolerance) <= {"atol", "rtol"}
        assert all(0 < float(v) <= 1e-2 for v in task.tolerance.values()), "a tolerance that loose hides bugs"
    full = load_task_module(task, size="full")
    for name, cpu_value in task.cpu_size.items():
        assert hasattr(full, name), f"CPU_SIZE names {name}, which is not a module global"
        assert 0 < cpu_value <= getattr(full, name), f"CPU_SIZE[{name!r}] must shrink the task"


@pytest.mark.parametrize("task_id", ids)
def test_module_form_equals_functional_form(task_id):
    task, module, model, init_inputs, inputs, reference = _prepared(task_id)
    names, tensors = _gathered_arguments(module, model, inputs)
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    assert sorted(names) == sorted(state), "module_fn must take exactly the model's parameters and buffers, by name"
    assert all(isinstance(p, torch.nn.Parameter) for p in model.parameters())
    with torch.no_grad():
        functional = module.module_fn(*inputs, *tensors)
    assert torch.equal(functional, reference), "forward must pass its tensors to fn in module_fn's order"


@pytest.mark.parametrize("task_id", ids)
def test_module_form_equals_standard_nn_layer(task_id):
    task, module, model, init_inputs, inputs, reference = _prepared(task_id)
    layer = nn_equivalent(_key(task), model, init_inputs)
    if layer is None:
        pytest.skip("no standard nn layer for this op (checked against module_fn only)")
    with torch.no_grad():
        expected = layer(*inputs)
    atol, rtol = task.tolerances()
    assert expected.shape == reference.shape
    torch.testing.assert_close(reference, expected, atol=atol, rtol=rtol, check_dtype=True)


@pytest.mark.parametrize("task_id", ids)
def test_inputs_and_parameters_are_deterministic_under_a_seed(task_id):
    task, module, model, _, inputs, reference = _prepared(task_id)
    fresh = load_task_module(task, size="cpu")
    same_model, same_inputs = instantiate(fresh, SEED)
    other_model, other_inputs = instantiate(fresh, OTHER_SEED)
    assert len(same_inputs) == len(inputs)
    for a, b, c in zip(inputs, same_inputs, other_inputs, strict=True):
        assert torch.equal(a, b)
        assert not torch.equal(a, c), "a different seed must give different inputs"
    for (name, a), b in zip(model.state_dict().items(), same_model.state_dict().values(), strict=True):
        assert torch.equal(a, b), f"parameter {name} is not reproducible under the seed"
    with torch.no_grad():
        other_reference = other_model(*other_inputs)
    atol, rtol = task.tolerances()
    assert not torch.allclose(other_reference.double(), reference.double(), atol=atol, rtol=rtol), (
        "outputs for two seeds agree within tolerance: a kernel returning a constant would pass"
    )


@pytest.mark.parametrize("task_id", ids)
def test_reference_output_is_not_degenerate(task_id):
    task, _, _, _, _, reference = _prepared(task_id)
    atol, rtol = task.tolerances()
    assert degeneracy_problems(reference, atol, rtol) == []


@pytest.mark.parametrize("task_id", ids)
def test_output_depends_on_every_input_and_parameter(task_id):
    task, module, model, _, inputs, reference = _prepared(task_id)
    names, tensors = _gathered_arguments(module, model, inputs)
    arguments = [*inputs, *tensors]
    labels = [f"input {i}" for i in range(len(inputs))] + names
    atol, rtol = task.tolerances()
    for index, label in enumerate(labels):
        changed = list(arguments)
        changed[index] = _perturbed(arguments[index].detach())
        with torch.no_grad():
            output = module.module_fn(*changed)
        assert not torch.allclose(output.double(), reference.double(), atol=atol, rtol=rtol), (
            f"perturbing {label} does not change the output beyond tolerance"
        )


@pytest.mark.gpu
@pytest.mark.parametrize("task_id", ids)
def test_full_size_reference_on_gpu_is_not_degenerate(task_id):
    task = SUITE.get(task_id)
    module = load_task_module(task, size="full")
    model, inputs = instantiate(module, SEED, device="cuda")
    with torch.no_grad():
        reference = model(*inputs).cpu()
    atol, rtol = task.tolerances()
    assert degeneracy_problems(reference, atol, rtol) == []
    del model, inputs
    torch.cuda.empty_cache()


@pytest.mark.parametrize("task_id", ids)
def test_model_and_inputs_are_made_on_the_target_device_directly(task_id):
    """On a GPU the builder draws inputs there (`instantiate` under a device context); every built-in task must
    build that way without falling back to the CPU. The meta device stands in for the GPU here."""
    from builder.tasks.loading import _construct

    task, *_ = _prepared(task_id)
    module = load_task_module(task, size="cpu")
    with torch.device("meta"):
        model, inputs = _construct(module, SEED)
    _, cpu_inputs = instantiate(module, SEED)
    assert all(p.is_meta for p in model.parameters())
    assert [(t.shape, t.dtype, t.is_meta) for t in inputs if isinstance(t, torch.Tensor)] == [
        (t.shape, t.dtype, True) for t in cpu_inputs if isinstance(t, torch.Tensor)
    ]


@pytest.mark.gpu
@pytest.mark.parametrize("task_id", ids[:12])
def test_inputs_drawn_on_the_gpu_are_deterministic_under_a_seed(task_id):
    module = load_task_module(SUITE.get(task_id), size="full")
    (model, inputs), (same_model, same_inputs) = instantiate(module, SEED, "cuda"), instantiate(module, SEED, "cuda")
    _, other_inputs = instantiate(module, OTHER_SEED, "cuda")
    for a, b, c in zip(inputs, same_inputs, other_inputs, strict=True):
        assert a.is_cuda and torch.equal(a, b) and not torch.equal(a, c)
    for a, b in zip(model.state_dict().values(), same_model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    del model, inputs, same_model, same_inputs, other_inputs
    torch.cuda.empty_cache()
