"""Executors turn (candidate, task) pairs into finished records; the orchestrator stores them.

- `LocalExecutor`: the verify engine's `Verifier.stream` (compile pool on the CPU cores pipelined with
  several evaluation workers per visible GPU, each timing window owning its GPU) on this machine.
- `RayExecutor`: the same engine on every node of a Ray cluster, one node engine (a Ray actor holding the node's
  GPUs) per node, fed pairs by the orchestrator, which takes the records back and stays the store's only writer.

Both only ever hand candidates to the engine, whose sandboxed children are the only processes that run
generated code. What verifies is passed in (`make_verifier`), the real engine's `Verifier` by default; a
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

    def control(self) -> Any:
        """The engine's control kernel to lead the first stream (`preflight.StreamControl`), or None where it passed
        here lately or the engine has none (then `preflight` runs before the first candidate)."""
        control = getattr(self.verifier, "control", None)
        return control() if callable(control) else None

    def stream(self, pairs: Iterable[tuple[Candidate, Task]]) -> Iterator[Any]:
        for item in self.verifier.stream(pairs):
            yield stamped(item, self.stand_in)

    def close(self) -> None:
        close = getattr(self.verifier, "close", None)
        if callable(close):
            close()


def make_executor(name: str, options: Any, settings: ExecutorSettings, *,
                  make_verifier: VerifierFactory = real_verifier) -> Any:  # fmt: skip
    """The executor called `name`, its engines made by `make_verifier` (on Ray, inside each node engine's actor)."""
    if name == "local":
        return LocalExecutor(options, settings, make_verifier)
    if name == "ray":
        from builder.pipeline.ray_executor import RayExecutor

        return RayExecutor(options, settings, make_verifier)
    raise UsageError(f"unknown executor '{name}' (expected one of {', '.join(EXECUTOR_NAMES)})")
