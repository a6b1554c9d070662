"""Executors turn (candidate, task) pairs into finished records; the orchestrator stores them.

- `LocalExecutor`: the verify engine's `Verifier.stream` (compile pool on the CPU cores pipelined with
  several evaluation workers per visible GPU, each timing window owning its GPU) on this machine.
- `RayExecutor`: compile and evaluate as Ray tasks on a Ray cluster (evaluation tasks ask for one GPU on
  the CUDA backend). Records come back to the orchestrator, which stays the only writer of the store.

Both only ever hand candidates to the engine, whose sandboxed children are the only processes that run
generated code.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from types import SimpleNamespace
from typing import Any

from builder import config
from builder.candidates import Candidate
from builder.errors import UsageError
from builder.tasks import Task
from schemas import KernelRecord

ENGINE_MODULE = "builder.verify.engine.verifier"
EXECUTOR_NAMES = ("local", "ray")


@dataclass
class ExecutorSettings:
    backend: str = "cuda"
    gpus: int | None = None  # None: every visible GPU
    compile_workers: int | None = None  # None: the engine's default (CPU cores)
    ray_address: str | None = None


def _load_object(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"{spec!r}: expected 'module:callable'")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot load {spec!r}: {exc}") from None


def make_verify_options(backend: str, seeds: list[int], **overrides: Any) -> Any:
    """The engine's VerifyOptions for a build, passing only the fields this engine version defines."""
    wanted = {"backend": backend, "seeds": list(seeds), "trials": len(seeds), **overrides}
    wanted = {k: v for k, v in wanted.items() if v is not None}
    if injected_engine():
        # An injected verifier/engine (tests, experiments) gets the plain values, engine or no engine.
        return SimpleNamespace(**wanted)
    engine = _engine()
    names = {f.name for f in fields(engine.VerifyOptions)}
    return engine.VerifyOptions(**{k: v for k, v in wanted.items() if k in names})


def injected_engine() -> bool:
    return bool(os.environ.get(config.VERIFIER_OVERRIDE_ENV) or os.environ.get(config.RAY_ENGINE_OVERRIDE_ENV))


def _engine() -> Any:
    try:
        return importlib.import_module(ENGINE_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name and ENGINE_MODULE.startswith(exc.name):
            raise UsageError(f"the verify engine ({ENGINE_MODULE}) is not installed in this checkout") from None
        raise


def failure_record(candidate: Candidate, task: Task, backend: str, status: str, error: str) -> Any:
    """A record for a candidate the executor lost (worker died, task raised): kept, never dropped."""
    from builder.verify.judge.verdict import base_fields  # the one place identity/provenance/code fields are filled

    fields = base_fields(candidate, task, backend)
    fields.update(status=status, flags=[], ranking_eligible=False, error=error[: config.ERROR_TEXT_BYTES])
    return KernelRecord(**fields)


class LocalExecutor:
    name = "local"

    def __init__(self, options: Any, settings: ExecutorSettings):
        self.options = options
        self.settings = settings
        self.verifier = self._make_verifier()

    def _make_verifier(self) -> Any:
        override = os.environ.get(config.VERIFIER_OVERRIDE_ENV)
        if override:
            return _load_object(override)(self.options)
        if self.settings.gpus is not None and self.settings.backend == "cuda":
            _limit_visible_gpus(self.settings.gpus)
        verifier_cls = _engine().Verifier
        accepted = inspect.signature(verifier_cls).parameters
        extra = {}
        for name in ("compile_workers", "gpus"):
            value = getattr(self.settings, name)
            if value is not None and name in accepted:
                extra[name] = value
        return verifier_cls(self.options, **extra)

    def preflight(self) -> None:
        """The engine's control kernel before the first candidate (an injected verifier may have none)."""
        check = getattr(self.verifier, "preflight", None)
        if callable(check):
            check()

    def stream(self, pairs: Iterable[tuple[Candidate, Task]]) -> Iterator[Any]:
        yield from self.verifier.stream(pairs)

    def close(self) -> None:
        close = getattr(self.verifier, "close", None)
        if callable(close):
            close()


def _limit_visible_gpus(count: int) -> None:
    # The engine starts its evaluation workers on every visible GPU; --gpus N narrows what it sees.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [v for v in visible.split(",") if v.strip()] if visible else [str(i) for i in range(count)]
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids[:count])


def make_executor(name: str, options: Any, settings: ExecutorSettings) -> Any:
    if name == "local":
        return LocalExecutor(options, settings)
    if name == "ray":
        from builder.pipeline.ray_executor import RayExecutor

        engine_module = os.environ.get(config.RAY_ENGINE_OVERRIDE_ENV, ENGINE_MODULE)
        return RayExecutor(options, settings, engine_module=engine_module)
    raise UsageError(f"unknown executor '{name}' (expected one of {', '.join(EXECUTOR_NAMES)})")
