"""Did loading or running the candidate change what the task's reference computes? (untrusted child side)

A fingerprint is taken before the candidate loads and compared after its calls:

- the operator dispatcher: each existing aten/prims operator's registrations (kernel and source location per dispatch
  key), so a C++ `TORCH_LIBRARY_IMPL(aten, CPU, m)` that replaces `aten::mm` shows; operators the candidate
  adds in a namespace of its own are new, not changes;
- the Python surface: every function, builtin and class bound in `torch` and its loaded submodules, the
  methods of those classes, and the task module's own functions and classes (object identity, and the code and
  defaults of Python functions), so `torch.matmul = fake` or `module_fn.__code__ = ...` shows;
- global state that changes results: default dtype, TF32 and reduced-precision switches, cuDNN and
  determinism switches, torch-function/dispatch mode stacks, autocast, global nn.Module hooks.

This runs inside the process it checks, so native code could hide from it; the clean reference and the
judge's probe comparison (`judge/outputs.tamper_reason`) do not depend on it. Any difference is `tampers_reference`.

`VerifierGuard` does the same for the verifier's own code in this process (its child-side modules, the clocks, the
result channel): any change is `tampers_verifier`, reported through a file the parent reads itself.
"""

from __future__ import annotations

import inspect
import itertools
import operator
import os
import sys
import types
import warnings
from dataclasses import dataclass
from typing import Any

Fingerprint = dict[str, Any]
# The operators a task's reference runs on. Others (collectives, DTensor) gain registrations when torch's
# compiler stack loads lazily, which is no tampering.
WATCHED_NAMESPACES = ("aten::", "prims::")


def _dispatcher() -> dict[str, str]:
    """Each watched operator's registrations as torch prints them: kernel and source location per dispatch key."""
    import torch

    dump = torch._C._dispatch_dump
    return {name: dump(name) for name in torch._C._dispatch_get_all_op_names() if name.startswith(WATCHED_NAMESPACES)}


def _identity(value: Any) -> tuple[int, ...] | None:
    """Ids of a callable worth watching, its code object and its default arguments (a task's `forward` takes its
    `fn=module_fn` from them); None for data and modules."""
    if isinstance(value, types.ModuleType) or not callable(value):
        return None
    code = getattr(value, "__code__", None)
    defaults = getattr(value, "__defaults__", None)
    defaults = defaults if isinstance(defaults, tuple) else ()  # a class's __defaults__ is a descriptor
    return (id(value), id(code) if code is not None else 0, *(id(item) for item in defaults))


# Python functions, whose code and defaults can be swapped in place; staticmethod and classmethod wrap one.
_FUNCTION_TYPES = frozenset({types.FunctionType, types.MethodType})
_WRAPPER_TYPES = frozenset({staticmethod, classmethod})
_function_state = operator.attrgetter("__code__", "__defaults__", "__kwdefaults__")


@dataclass
class PythonSurface:
    """Torch's Python surface at one moment: a copy of each watched namespace (the loaded torch modules, the task
    module, and the classes bound in them that torch or the task defines) and the code and defaults of each Python
    function bound there. The copies hold the objects themselves, so an id is never reused, and comparing two
    surfaces runs in C but for the few names that differ: about a third of the time that building an id tuple per
    name took."""

    modules: dict[str, dict[str, Any]]
    classes: dict[str, dict[str, Any]]
    functions: list[Any]
    states: list[tuple[Any, ...]]  # each function's code, defaults and keyword defaults


def _python_surface(task_module: Any) -> PythonSurface:
    modules = {n: dict(vars(m)) for n, m in list(sys.modules.items()) if (n == "torch" or n.startswith("torch.")) and m}
    found = {id(value): value for value in [v for n in modules.values() for v in n.values() if isinstance(v, type)]}
    task_classes: dict[int, type] = {}
    if task_module is not None:
        modules["<task>"] = dict(vars(task_module))
        task_classes = {id(v): v for v in modules["<task>"].values() if isinstance(v, type)}
    classes: dict[str, dict[str, Any]] = {}
    for key, cls in {**found, **task_classes}.items():
        owner = str(getattr(cls, "__module__", "") or "")
        name = f"{owner}.{cls.__qualname__}"
        if (key in task_classes or owner.startswith("torch")) and name not in classes:
            classes[name] = dict(vars(cls))  # the first of two classes of one name, in import order
    namespaces = [*modules.values(), *classes.values()]
    functions = [value for namespace in namespaces for value in namespace.values() if type(value) in _FUNCTION_TYPES]
    wrapped = [value.__func__ for namespace in namespaces for value in namespace.values()
               if type(value) in _WRAPPER_TYPES]  # fmt: skip
    functions += [function for function in wrapped if type(function) in _FUNCTION_TYPES]
    return PythonSurface(modules, classes, functions, list(map(_function_state, functions)))


def _python_changes(before: PythonSurface, after: PythonSurface) -> list[str]:
    """Names bound in both walks to another callable (data that changes is no tampering), and functions whose code
    or defaults were swapped. Where nothing differs, whole namespaces and the functions compare by identity in C."""
    changed = []
    for old_namespaces, new_namespaces in ((before.modules, after.modules), (before.classes, after.classes)):
        for owner_name, old in old_namespaces.items():
            new = new_namespaces.get(owner_name)
            if new is None or (len(old) == len(new) and all(map(operator.is_, old, new))
                               and all(map(operator.is_, old.values(), new.values()))):  # fmt: skip
                continue
            for attribute in [name for name, value in old.items() if new.get(name, value) is not value]:
                if _identity(old[attribute]) is not None or _identity(new[attribute]) is not None:
                    changed.append(f"{owner_name}.{attribute}")
    if all(map(operator.is_, before.functions, after.functions)) and len(after.functions) >= len(before.functions):
        now = after.states[: len(before.functions)]  # the same functions first, in the same order
    else:  # bound in another order: matched by identity
        state_of = {id(function): state for function, state in zip(after.functions, after.states, strict=True)}
        now = [state_of.get(id(function)) for function in before.functions]
    flat_before = itertools.chain.from_iterable(before.states)
    flat_now = itertools.chain.from_iterable(state or (None, None, None) for state in now)
    if all(map(operator.is_, flat_before, flat_now)):
        return changed
    for function, state, later in zip(before.functions, before.states, now, strict=True):
        if later is not None and any(map(operator.is_not, state, later)):
            changed.append(f"{function.__module__}.{function.__qualname__}")
    return changed


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
        old, new = before.get(kind), after.get(kind)
        if isinstance(old, PythonSurface) and isinstance(new, PythonSurface):
            changed = sorted(set(_python_changes(old, new)))
        else:
            old, new = old or {}, new or {}
            changed = sorted(name for name in old.keys() & new.keys() if old[name] != new[name])
        if changed:
            found.append(f"{label}: {', '.join(changed[:limit])}" + (" ..." if len(changed) > limit else ""))
    return found


# --- the verifier's own code in the candidate's process -------------------------------------------------------------
# The child-side modules the verdict's claims come from, imported before the candidate loads so that none of them
# can be imported first, already changed, by the candidate.
CHILD_SIDE_PACKAGES = ("builder.verify.child", "builder.verify.protocol")
NOT_IN_AN_EVALUATION = ("builder.verify.child.build",)  # the compile child's entry point
SHARED_MODULES = ("builder.config", "builder.tasks.loading", "schemas")


def child_side_modules() -> list[str]:
    """Every module of the children's side and what crosses the boundary, with the shared ones the checks read."""
    import importlib
    import pkgutil

    names = list(SHARED_MODULES)
    for package in CHILD_SIDE_PACKAGES:
        path = importlib.import_module(package).__path__
        names += [f"{package}.{info.name}" for info in pkgutil.iter_modules(path)]
    return [name for name in names if name not in NOT_IN_AN_EVALUATION]


# The clocks the timers read and the calls that carry results out of the process.
WATCHED_CALLS = (("time", ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns",
                           "process_time", "thread_time", "sleep")),
                 ("json", ("dumps", "dump", "loads")), ("os", ("replace", "rename", "write", "open", "close", "_exit")),
                 ("builtins", ("open", "print")), ("safetensors.torch", ("save_file", "save", "load_file")))  # fmt: skip
_os_open, _os_write, _os_close = os.open, os.write, os.close  # taken at import, before any candidate code


def verifier_fingerprint() -> Fingerprint:
    """Identity of every function and class (and their methods) in the verifier's modules loaded here, of the clocks
    and of the result channel's calls."""
    import importlib

    for name in child_side_modules():
        importlib.import_module(name)
    surface: Fingerprint = {}
    for module_name, module in list(sys.modules.items()):
        spec_name = getattr(getattr(module, "__spec__", None), "name", None) or ""
        if module_name == "__main__" and spec_name.startswith("builder."):
            module_name = f"__main__:{spec_name}"  # `python -m builder.verify.child.main` runs as __main__
        elif module is None or not (module_name.startswith("builder.") or module_name == "schemas"):
            continue
        for attribute, value in list(vars(module).items()):
            identity = _identity(value)
            if identity is None:
                continue
            surface[f"{module_name}.{attribute}"] = identity
            if inspect.isclass(value) and getattr(value, "__module__", None) == module_name:
                for name, member in list(vars(value).items()):
                    if (member_identity := _identity(member)) is not None:
                        surface[f"{module_name}.{attribute}.{name}"] = member_identity
    for module_name, names in WATCHED_CALLS:
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
        for name in names:
            surface[f"{module_name}.{name}"] = _identity(getattr(module, name, None)) or (0,)
    return surface


def verifier_changes(before: Fingerprint, after: Fingerprint, limit: int = 4) -> list[str]:
    """The verifier's names bound to something else since `before` (a module that loaded later is no change)."""
    changed = sorted(name for name in before.keys() & after.keys() if before[name] != after[name])
    return changed[:limit] + (["..."] if len(changed) > limit else [])


class VerifierGuard:
    """Compares the verifier's fingerprint with the one taken before the candidate loaded: always at the fixed
    moments the child names, and between steps of the checks and of the timing window at random ones. The first
    change found is written at once to the job's `tampered_path` with calls taken before any candidate code ran,
    so a rebound result writer cannot drop it; the parent reads that file itself (`tampers_verifier`)."""

    def __init__(self, job: dict[str, Any]) -> None:
        import secrets

        self.path = job.get("tampered_path")
        self.before = verifier_fingerprint()
        self.found: str | None = None
        self._random = secrets.SystemRandom()

    def check(self, moment: str) -> str | None:
        if self.found is None and (changed := verifier_changes(self.before, verifier_fingerprint())):
            self.found = f"{moment}: {', '.join(changed)}"
            if self.path:
                data = self.found.encode()[:4000]
                fd = _os_open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    _os_write(fd, data)
                finally:
                    _os_close(fd)
        return self.found

    def maybe_check(self, moment: str) -> None:
        if self._random.random() < 0.5:
            self.check(moment)
