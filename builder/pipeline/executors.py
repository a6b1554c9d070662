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

from collections.abc import Iterable, Iterator
from typing import Any

from builder.candidates import Candidate
from builder.errors import UsageError
from builder.pipeline.engine_access import ExecutorSettings, VerifierFactory, real_verifier, stamped, stand_in_name
from builder.tasks import Task

EXECUTOR_NAMES = ("local", "ray")


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
