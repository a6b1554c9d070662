"""Execute a task file and build its model and inputs deterministically.

Task files are reference code we trust as much as the suite they come from; candidate code never
passes through here in the builder's process (the sandbox child uses these helpers itself).
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import weakref
from types import ModuleType
from typing import Any

from builder.tasks.suite import Task

_counter = itertools.count()
# Task modules whose Model needed host tensors to be built for a device (the CPU fallback of `instantiate`), by the
# devices they fell back for: a KernelBench `ModelNew` is built the way its task's Model was.
_BUILT_ON_HOST: weakref.WeakKeyDictionary[ModuleType, set[str]] = weakref.WeakKeyDictionary()


def load_task_module(task: Task, size: str = "full") -> ModuleType:
    """Import the task file as a fresh module; `size="cpu"` applies the task's CPU_SIZE overrides."""
    if size not in ("full", "cpu"):
        raise ValueError(f"size must be 'full' or 'cpu', not {size!r}")
    name = f"_ka_task_{task.level}_{task.number}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, task.path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {task.path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    if size == "cpu":
        for key, value in task.cpu_size.items():
            setattr(module, key, value)
    return module


def instantiate(module: ModuleType, seed: int, device: str = "cpu", dtype: Any = None) -> tuple[Any, list[Any]]:
    """Build (model, inputs) under `seed`: parameters from one generator state, inputs from the next.

    They are made on `device` directly, from its own generator (a GPU draws a 128 M-value input in a millisecond,
    a CPU core in a second). A task whose construction needs host tensors (a `.numpy()` call, say) is built on
    the CPU and moved: the same way in every process, since it depends on the task's code alone."""
    import torch

    try:
        with torch.device(device):
            model, inputs = _construct(module, seed)
    except torch.OutOfMemoryError:
        raise  # not the task's code: falling back here could give this process other inputs than another's
    except Exception:  # noqa: BLE001 - the task's own code; it raises again below if the CPU cannot build it
        if device == "cpu":
            raise
        model, inputs = _construct(module, seed)
        _BUILT_ON_HOST.setdefault(module, set()).add(device)
    model = model.to(device)
    if dtype is not None:
        model = model.to(dtype)
    moved = []
    for value in inputs:
        if isinstance(value, torch.Tensor):
            value = value.to(device)
            if dtype is not None and value.is_floating_point():
                value = value.to(dtype)
        moved.append(value)
    return model.eval(), moved


def construction_device(module: ModuleType, device: str) -> str:
    """Where `instantiate` builds the task's Model for `device`: `device` itself, or "cpu" for a task whose
    construction needs host tensors (then moved). Known once the task was instantiated for `device`."""
    return "cpu" if device in _BUILT_ON_HOST.get(module, ()) else device


def _construct(module: ModuleType, seed: int) -> tuple[Any, list[Any]]:
    import torch

    torch.manual_seed(seed)
    model = module.Model(*module.get_init_inputs())
    return model, list(module.get_inputs())


def draw_inputs(module: ModuleType, seed: int, device: str = "cpu") -> list[Any]:
    """Fresh inputs for one timed call: `get_inputs()` under `seed`, on `device` directly (as `instantiate` draws
    them, with the same fallback to the host for a task that needs host tensors). The clean reference child draws
    the same values for the calls whose outputs the parent judges."""
    import torch

    try:
        with torch.device(device):
            torch.manual_seed(seed)
            inputs = list(module.get_inputs())
    except torch.OutOfMemoryError:
        raise
    except Exception:  # noqa: BLE001 - the task's own code; it raises again below if the CPU cannot draw them
        if device == "cpu":
            raise
        torch.manual_seed(seed)
        inputs = list(module.get_inputs())
    return [value.to(device) if isinstance(value, torch.Tensor) else value for value in inputs]
