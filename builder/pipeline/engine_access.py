"""What every executor needs of the verify engine: its module, its `Verifier` and `VerifyOptions`, the settings an
executor runs with, and the stamp a record made by a stand-in verifier carries (`stand_in_verifier`)."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from types import ModuleType
from typing import Any

from schemas import KernelRecord

ENGINE_MODULE = "builder.verify.engine.verifier"


@dataclass
class ExecutorSettings:
    backend: str = "cuda"
    gpus: int | None = None  # None: every visible GPU
    compile_workers: int | None = None  # None: the Verifier applies config.compile_workers_for on its node
    ray_address: str | None = None


# (VerifyOptions, ExecutorSettings) -> an object with stream(pairs), and optionally preflight() and close().
VerifierFactory = Callable[[Any, ExecutorSettings], Any]


def real_engine() -> ModuleType:
    """The verify engine module (its `Verifier` and `VerifyOptions`), imported when an executor first needs it: a
    command that verifies nothing never loads the engine."""
    return importlib.import_module(ENGINE_MODULE)


def real_verifier(options: Any, settings: ExecutorSettings) -> Any:
    """The engine's Verifier, seeing only the GPUs --gpus leaves it (compile workers come with `options`)."""
    if settings.gpus is not None and settings.backend == "cuda":
        _limit_visible_gpus(settings.gpus)
    return real_engine().Verifier(options=options)


def make_verify_options(backend: str, seeds: list[int], **overrides: Any) -> Any:
    """The engine's VerifyOptions for a build, passing only the fields this engine version defines."""
    wanted = {"backend": backend, "seeds": list(seeds), "trials": len(seeds), **overrides}
    wanted = {k: v for k, v in wanted.items() if v is not None}
    options_class = real_engine().VerifyOptions
    names = {f.name for f in fields(options_class)}
    return options_class(**{k: v for k, v in wanted.items() if k in names})


def stand_in_name(verifier: Any) -> str:
    """`module:name` of what a stand-in verifier or engine is (a class, a function, a partial of one, a module)."""
    target = getattr(verifier, "func", verifier)  # functools.partial
    if isinstance(target, ModuleType):
        return target.__name__
    name = getattr(target, "__qualname__", type(target).__qualname__)
    return f"{getattr(target, '__module__', None) or '?'}:{name}"


def stamped(item: Any, stand_in: str | None) -> Any:
    """The item as yielded, a record that a stand-in made carrying the stand-in's name."""
    if stand_in is not None and isinstance(item, KernelRecord):
        item.stand_in_verifier = stand_in
    return item


def _limit_visible_gpus(count: int) -> None:
    # The engine starts its evaluation workers on every visible GPU; --gpus N narrows what it sees.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [v for v in visible.split(",") if v.strip()] if visible else [str(i) for i in range(count)]
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids[:count])
