"""Ray executor (optional extra `ray`): compile and evaluate candidates as Ray tasks.

Compile tasks take one CPU each; evaluation tasks take one GPU on the CUDA backend (Ray sets
CUDA_VISIBLE_DEVICES for them, so the engine evaluates on device 0 of what it sees). The orchestrator
keeps a bounded window of tasks in flight and yields records as they finish, in completion order.

On a multi-node cluster the compile cache should live on shared storage; when an evaluation lands on a
node where the compiled library is missing, it recompiles there (content-addressed, so the same build).
"""

from __future__ import annotations

import importlib
import socket
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from builder import config
from builder.candidates import Candidate
from builder.errors import UsageError
from builder.pipeline.executors import ExecutorSettings, failure_record
from builder.tasks import Task

IN_FLIGHT_PER_CPU = 2  # evaluation tasks submitted ahead per cluster CPU (keeps memory bounded)


def _compile_task(engine_module: str, candidate: Candidate, task: Task, options: Any) -> Any:
    engine = importlib.import_module(engine_module)
    return engine.compile_candidate(candidate, task, options)


def _evaluate_task(engine_module: str, compiled: Any, candidate: Candidate, task: Task, options: Any) -> Any:
    engine = importlib.import_module(engine_module)
    library = getattr(compiled, "library_path", None)
    if getattr(compiled, "ok", False) and library and not Path(library).exists():
        compiled = engine.compile_candidate(candidate, task, options)
    return engine.evaluate_compiled(compiled, candidate, task, options)


def check_reachable(address: str, timeout_s: float = config.RAY_CONNECT_TIMEOUT_S) -> None:
    """A one-line UsageError for an address nothing listens on: ray.init itself retries for minutes."""
    if address in ("auto", "local"):
        return  # Ray's own discovery of a cluster started on this machine
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--ray-address {address!r}: expected HOST:PORT, ray://HOST:PORT or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise UsageError(f"cannot reach the Ray cluster at {address}: {exc}") from None


class RayExecutor:
    name = "ray"

    def __init__(self, options: Any, settings: ExecutorSettings, engine_module: str):
        try:
            import ray
        except ImportError:
            raise UsageError("--executor ray needs Ray: pip install 'verified-kernel-archive[ray]'") from None
        self.ray = ray
        self.options = options
        self.settings = settings
        self.engine_module = engine_module
        self._owns_ray = False
        if not ray.is_initialized():
            if settings.ray_address:
                check_reachable(settings.ray_address)
            try:
                if settings.ray_address:
                    ray.init(address=settings.ray_address, include_dashboard=False, log_to_driver=False)
                else:
                    env = {"PYTHONPATH": _python_path()}
                    ray.init(include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
            except ConnectionError as exc:
                raise UsageError(f"cannot reach the Ray cluster at {settings.ray_address}: {exc}") from None
            self._owns_ray = True
        gpu_per_eval = 1 if settings.backend == "cuda" else 0
        self._compile = ray.remote(num_cpus=1, max_retries=1)(_compile_task)
        self._evaluate = ray.remote(num_cpus=0 if gpu_per_eval else 1, num_gpus=gpu_per_eval, max_retries=1)(
            _evaluate_task
        )
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.window = max(2, IN_FLIGHT_PER_CPU * cpus)

    def stream(self, pairs: Iterable[tuple[Candidate, Task]]) -> Iterator[Any]:
        ray = self.ray
        pending: dict[Any, tuple[Candidate, Task]] = {}
        source = iter(pairs)
        exhausted = False
        while True:
            while not exhausted and len(pending) < self.window:
                try:
                    candidate, task = next(source)
                except StopIteration:
                    exhausted = True
                    break
                compiled = self._compile.remote(self.engine_module, candidate, task, self.options)
                ref = self._evaluate.remote(self.engine_module, compiled, candidate, task, self.options)
                pending[ref] = (candidate, task)
            if not pending:
                return
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                candidate, task = pending.pop(ref)
                try:
                    yield ray.get(ref)
                except ray.exceptions.RayError as exc:
                    reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
                    yield failure_record(candidate, task, self.settings.backend, "crash", f"ray task failed: {reason}")

    def close(self) -> None:
        if self._owns_ray:
            self.ray.shutdown()


def _python_path() -> str:
    import os

    parts = [str(config.REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(parts))
