"""A KernelBench `ModelNew` built as its task's Model is built (untrusted child side).

KernelBench's evaluation seeds the generator, builds Model, seeds it again and builds ModelNew from the same init
inputs, so a ModelNew that makes its parameters as Model does (`nn.Linear`, `nn.Parameter(torch.randn(n))`) holds
the same values. `tasks.instantiate` builds the task's Model inside `torch.device(device)`: a CUDA model's values
come from the CUDA generator, which draws other numbers than the CPU's from the same seed. `build_model_new` makes
ModelNew the same way: the trial's seed, then the task's init inputs and the constructor, inside the same device
context, or on the host for a task whose Model needs host tensors to be built (`loading.construction_device`).

`adopt_reference_state` then copies the reference model's state into the candidate wherever a name and a shape
match, so a ModelNew that makes the same parameters in another order, or draws a number first, still computes
with the reference's values. The names it changed are counted (`reference_state_loaded` in the record): zero for
a ModelNew built as its Model. The candidate's state is snapshot after this, so the parameter-mutation check and
the parameter perturbations (ignores_input) see the values it computes with.

A ModelNew that computes with torch ops is called at the numeric settings its reference was computed at
(`FullPrecisionCall`: no TF32 in cuDNN or cuBLAS, no reduced-precision fp16/bf16 reductions), as KernelBench calls
both sides at the same settings: with cuDNN's TF32 default an `nn.Conv2d` of its own can be ~1e-3 off the float32
reference. The candidate cannot choose them itself: changing torch's global settings is `tampers_reference`.
"""

from __future__ import annotations

from typing import Any


def build_model_new(model_class: type, task_module: Any, seed: int, device: str) -> Any:
    """ModelNew under `seed` as `instantiate` builds the task's Model for `device`, moved there, in eval mode.

    Where the Model was built in the device's context and ModelNew cannot be (it needs host tensors itself), it
    is built on the host: its values then differ from the Model's, and `adopt_reference_state` makes up for it.
    Raises what the constructor raised."""
    import torch

    from builder.tasks.loading import construction_device

    where = construction_device(task_module, device)
    try:
        model = _construct(model_class, task_module, seed, where)
    except torch.OutOfMemoryError:
        raise
    except Exception as failure:
        if where == "cpu":
            raise
        try:
            model = _construct(model_class, task_module, seed, "cpu")
        except Exception:  # noqa: BLE001 - the device context's failure is the one to report
            raise failure from None
    return model.to(device).eval()


def _construct(model_class: type, task_module: Any, seed: int, where: str) -> Any:
    import torch

    with torch.device(where):  # the order of `tasks.loading._construct`: seed, init inputs, constructor
        torch.manual_seed(seed)
        return model_class(*task_module.get_init_inputs())


def adopt_reference_state(candidate: Any, reference: Any) -> list[str]:
    """Copy each reference state_dict entry into the candidate's entry of the same name and shape; the names whose
    values this changed. A candidate without a state_dict keeps its own values."""
    import torch

    from builder.verify.protocol.compare import same_bits

    if not callable(getattr(candidate, "state_dict", None)) or not callable(getattr(reference, "state_dict", None)):
        return []
    theirs = {name: t for name, t in reference.state_dict().items() if isinstance(t, torch.Tensor)}
    changed = []
    with torch.no_grad():
        for name, tensor in candidate.state_dict().items():
            source = theirs.get(name)
            if not isinstance(tensor, torch.Tensor) or source is None or tensor.shape != source.shape:
                continue
            if tensor.is_meta or source.is_meta:  # no values to compare or copy
                continue
            source = source.to(device=tensor.device, dtype=tensor.dtype)
            if same_bits(tensor, source):
                continue
            tensor.copy_(source)  # state_dict() entries share storage with the parameters and buffers
            changed.append(name)
    return changed


class FullPrecisionCall:
    """The ModelNew (`module`) called at its reference's numeric settings (`precision.full_precision`), which are
    put back after each call."""

    def __init__(self, module: Any) -> None:
        self.module = module

    def __call__(self, *inputs: Any) -> Any:
        from builder.verify.child.precision import full_precision

        with full_precision():
            return self.module(*inputs)
