"""Executors turn (candidate, task) pairs into finished records; the orchestrator stores them.

- `LocalExecutor`: the verify engine's `Verifier.stream` (compile pool on the CPU cores pipelined with
  several evaluation workers per visible GPU, each timing window owning its GPU) on this machine.
- `RayExecutor`: compile and evaluate as Ray tasks on a Ray cluster (evaluation tasks ask for one GPU on
  the CUDA backend). Records come back to the orchestrator, which stays the only writer of the store.

Both only ever hand candidates to the engine, whose sandboxed children are the only processes that run
generated code. What verifies is passed in (`make_verifier`, `ray_engine`), the real engine by default; a
record that anything else made is stamped with its name (`stand_in_verifier`), so that no stand-in's verdict
can pass for a verified one in a store or an export.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields
from types import ModuleType
from typing import Any

from builder.candidates import Candidate
from builder.errors import UsageError
from builder.tasks import Task
from schemas import KernelRecord

ENGINE_MODULE = "builder.verify.engine"
EXECUTOR_NAMES = ("local", "ray")


@dataclass
class ExecutorSettings:
    backend: str = "cuda"
    gpus: int | None = None  # None: every visible GPU
    compile_workers: int | None = None  # None: the engine's default (CPU cores)
    ray_address: str | None = None


# (VerifyOptions, ExecutorSettings) -> an object with stream(pairs), and optionally preflight() and close().
VerifierFactory = Callable[[Any, ExecutorSettings], Any]


def real_engine() -> ModuleType:
    """The verify engine module (compile_candidate, evaluate_compiled, Verifier, VerifyOptions)."""
    try:
        return importlib.import_module(ENGINE_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name and ENGINE_MODULE.startswith(exc.name):
            raise UsageError(f"the verify engine ({ENGINE_MODULE}) is not installed in this checkout") from None
        raise


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


class LocalExecutor:
    name = "local"

    def __init__(self, options: Any, settings: ExecutorSettings, make_verifier: VerifierFactory = real_verifier):
        self.options = options
        self.settings = settings
        self.stand_in = None if make_verifier is real_verifier else stand_in_name(make_verifier)
        self.verifier = make_verifier(options, settings)

    def preflight(self) -> None:
        """The engine's control kernel before the first candidate (a stand-in may have none)."""
        check = getattr(self.verifier, "preflight", None)
        if callable(check):
            check()

    def stream(self, pairs: Iterable[tuple[Candidate, Task]]) -> Iterator[Any]:
        for item in self.verifier.stream(pairs):
            yield stamped(item, self.stand_in)

    def close(self) -> None:
        close = getattr(self.verifier, "close", None)
        if callable(close):
            close()


def _limit_visible_gpus(count: int) -> None:
    # The engine starts its evaluation workers on every visible GPU; --gpus N narrows what it sees.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [v for v in visible.split(",") if v.strip()] if visible else [str(i) for i in range(count)]
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids[:count])


def make_executor(
    name: str,
    options: Any,
    settings: ExecutorSettings,
    *,
    make_verifier: VerifierFactory = real_verifier,
    ray_engine: Any = None,
) -> Any:
    """The executor called `name`: `make_verifier` serves the local one, `ray_engine` (a module, or a class,
    with compile_candidate and evaluate_compiled; None: the real engine) the Ray one."""
    if name == "local":
        return LocalExecutor(options, settings, make_verifier)
    if name == "ray":
        from builder.pipeline.ray_executor import RayExecutor

        return RayExecutor(options, settings, ray_engine)
    raise UsageError(f"unknown executor '{name}' (expected one of {', '.join(EXECUTOR_NAMES)})")
