"""Did loading or running the candidate change what the task's reference computes? (untrusted child side)

A fingerprint is taken before the candidate loads and compared after its calls:

- the operator dispatcher: each existing aten/prims operator's registrations (kernel and source location per dispatch
  key), so a C++ `TORCH_LIBRARY_IMPL(aten, CPU, m)` that replaces `aten::mm` shows; operators the candidate
  adds in a namespace of its own are new, not changes;
- the Python surface: every function, builtin and class bound in `torch` and its loaded submodules, the
  methods of those classes, and the task module's own functions (object identity, and the code object of
  Python functions), so `torch.matmul = fake` or `module_fn.__code__ = ...` shows;
- global state that changes results: default dtype, TF32 and reduced-precision switches, cuDNN and
  determinism switches, torch-function/dispatch mode stacks, autocast, global nn.Module hooks.

This runs inside the process it checks, so native code could hide from it; the clean reference and the
judge's probe comparison (`judge.tamper_reason`) do not depend on it. Any difference is `tampers_reference`.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
import types
import warnings
from typing import Any

Fingerprint = dict[str, Any]
# The operators a task's reference runs on. Others (collectives, DTensor) gain registrations when torch's
# compiler stack loads lazily, which is no tampering.
WATCHED_NAMESPACES = ("aten::", "prims::")


def _dispatcher() -> dict[str, str]:
    import torch

    table = {}
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith(WATCHED_NAMESPACES):
            continue
        table[name] = hashlib.blake2b(torch._C._dispatch_dump(name).encode(), digest_size=12).hexdigest()
    return table


def _identity(value: Any) -> tuple[int, ...] | None:
    """Ids of a callable worth watching, its code object and its default arguments (a task's `forward` takes its
    `fn=module_fn` from them); None for data and modules."""
    if isinstance(value, types.ModuleType) or not callable(value):
        return None
    code = getattr(value, "__code__", None)
    defaults = getattr(value, "__defaults__", None)
    defaults = defaults if isinstance(defaults, tuple) else ()  # a class's __defaults__ is a descriptor
    return (id(value), id(code) if code is not None else 0, *(id(item) for item in defaults))


def _python_surface(task_module: Any) -> dict[str, tuple[int, ...]]:
    surface: dict[str, tuple[int, ...]] = {}
    modules = [(n, m) for n, m in list(sys.modules.items()) if (n == "torch" or n.startswith("torch.")) and m]
    if task_module is not None:
        modules.append(("<task>", task_module))
    classes: dict[int, type] = {}
    for module_name, module in modules:
        for attribute, value in list(vars(module).items()):
            identity = _identity(value)
            if identity is None:
                continue
            surface[f"{module_name}.{attribute}"] = identity
            owner = str(getattr(value, "__module__", "") or "")
            if inspect.isclass(value) and (module_name == "<task>" or owner.startswith("torch")):
                classes[id(value)] = value
    for cls in classes.values():
        for attribute, value in list(vars(cls).items()):
            identity = _identity(value)
            if identity is not None:
                surface[f"{cls.__module__}.{cls.__qualname__}.{attribute}"] = identity
    return surface


def _global_state() -> dict[str, Any]:
    import torch
    from torch.nn.modules import module as nn_module

    state: dict[str, Any] = {
        "default_dtype": str(torch.get_default_dtype()),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn.enabled": torch.backends.cudnn.enabled,
        "cudnn.deterministic": torch.backends.cudnn.deterministic,
        "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cuda.matmul.fp16_reduced": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "cuda.matmul.bf16_reduced": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "torch_function_modes": torch._C._len_torch_function_stack(),
        "torch_dispatch_modes": torch._C._len_torch_dispatch_stack(),
        "autocast_cpu": torch.is_autocast_enabled("cpu"),
        "autocast_cuda": torch.is_autocast_enabled("cuda"),
    }
    for name in dir(nn_module):
        if name.startswith("_global_") and isinstance(getattr(nn_module, name), dict):
            state[f"nn.Module.{name}"] = len(getattr(nn_module, name))
    return state


def prime() -> None:
    """Import what the checks load lazily (the profiler imports torch._dynamo, which rebinds torch.manual_seed),
    so that a fingerprint taken afterwards sees only what the candidate changes."""
    import torch._dynamo  # noqa: F401
    import torch.profiler  # noqa: F401


def fingerprint(task_module: Any = None) -> Fingerprint:
    prime()
    with warnings.catch_warnings():  # reading deprecated torch attributes warns
        warnings.simplefilter("ignore")
        return {"dispatcher": _dispatcher(), "python": _python_surface(task_module), "state": _global_state()}


def changes(before: Fingerprint, after: Fingerprint, limit: int = 4) -> list[str]:
    """What differs between two fingerprints: one line naming the kind and the first names, or nothing.
    Only names present in both count: a lazily imported torch submodule or a new operator is no change."""
    found: list[str] = []
    for kind, label in (("state", "global torch settings changed"), ("dispatcher", "operator registrations changed"),
                        ("python", "torch functions rebound")):  # fmt: skip
        old, new = before.get(kind, {}), after.get(kind, {})
        changed = sorted(name for name in old.keys() & new.keys() if old[name] != new[name])
        if changed:
            found.append(f"{label}: {', '.join(changed[:limit])}" + (" ..." if len(changed) > limit else ""))
    return found
