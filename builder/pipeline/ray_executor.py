"""Ray executor (optional extra `ray`): compile and evaluate candidates as Ray tasks.

Compile tasks take one CPU each; evaluation tasks take one GPU on the CUDA backend (Ray sets
CUDA_VISIBLE_DEVICES for them, so the engine evaluates on device 0 of what it sees). The orchestrator
keeps a bounded window of tasks in flight and yields records as they finish, in completion order.

Workers import the project from this checkout's path (and the driver's PYTHONPATH), so every node needs the
same checkout at the same path. On a multi-node cluster the compile cache should live on shared storage; when
an evaluation lands on a node where the compiled library is missing, it recompiles there (content-addressed,
so the same build).

Before the first candidate, the engine's control kernel (`control_check`) runs on every node that evaluates, with
the resources an evaluation takes there: a node that cannot verify a known-good kernel stops the build with one
line before anything is stored. Each evaluation task runs it too, where it has not passed on that node and device
lately (a marker file makes that free), so a node that joins later is checked before its first verdict.

A Ray task that fails (its worker killed, its node lost, the engine raising) says nothing about the kernel,
which runs only in the engine's sandboxed children: the pair comes back as an `InfrastructureFailure`, which
the build puts back in its queue, never as a record.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from builder import config
from builder.candidates import Candidate
from builder.errors import InfrastructureError, UsageError
from builder.pipeline.engine_access import ExecutorSettings, real_engine, stamped, stand_in_name
from builder.tasks import Task
from builder.verify.engine.infrastructure import InfrastructureFailure

IN_FLIGHT_PER_CPU = 2  # evaluation tasks submitted ahead per cluster CPU (keeps memory bounded)
TASK_RETRIES = 1  # Ray re-runs a task whose worker or node died once before its pair goes back to the build


def _compile_task(engine: Any, candidate: Candidate, task: Task, options: Any) -> Any:
    return engine.compile_candidate(candidate, task, options)


def _control_task(engine: Any, options: Any) -> str | None:
    """Why the engine's control kernel fails on this worker's node and device, or None (also for an engine that
    has no control: a stand-in)."""
    check = getattr(engine, "control_check", None)
    if not callable(check):
        return None
    try:
        check(options)
    except InfrastructureError as exc:
        return str(exc)
    return None


def _evaluate_task(engine: Any, compiled: Any, candidate: Candidate, task: Task, options: Any) -> Any:
    if (failed := _control_task(engine, options)) is not None:
        raise InfrastructureError(failed)  # a Ray task failure: the pair goes back to the build, no record
    library = getattr(compiled, "library_path", None)
    if getattr(compiled, "ok", False) and library and not Path(library).exists():
        compiled = engine.compile_candidate(candidate, task, options)  # compiled on another node
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


def worker_environment() -> dict[str, str]:
    """What Ray workers need to import this checkout whatever its path (an editable install elsewhere included):
    it first on their path, then the driver's PYTHONPATH."""
    parts = [str(config.REPO_ROOT), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys(parts))}


def failure_reason(exc: BaseException) -> str:
    """The last line of a Ray error (its traceback above it says where the engine raised)."""
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return f"the Ray task failed: {lines[-1].strip() if lines else type(exc).__name__}"


class RayExecutor:
    name = "ray"

    def __init__(self, options: Any, settings: ExecutorSettings, engine: Any = None):
        """`engine`: a module (or a class) with compile_candidate and evaluate_compiled that Ray workers can
        import by name (None: the real verify engine); records of any other are stamped with its name."""
        try:
            import ray
        except ImportError:
            raise UsageError("--executor ray needs Ray: pip install 'verified-kernel-archive[ray]'") from None
        self.ray = ray
        self.options = options
        self.settings = settings
        real = real_engine()
        self.engine = engine if engine is not None else real
        self.stand_in = None if self.engine is real else stand_in_name(self.engine)
        self._owns_ray = False
        if not ray.is_initialized():
            self._connect(settings.ray_address)
        gpu_per_eval = 1 if settings.backend == "cuda" else 0
        self._compile = ray.remote(num_cpus=1, max_retries=TASK_RETRIES)(_compile_task)
        self._evaluate = ray.remote(num_cpus=0 if gpu_per_eval else 1, num_gpus=gpu_per_eval, max_retries=TASK_RETRIES)(
            _evaluate_task
        )
        self._control = ray.remote(num_cpus=0 if gpu_per_eval else 1, num_gpus=gpu_per_eval, max_retries=0)(
            _control_task
        )
        self._evaluation_resource = "GPU" if gpu_per_eval else "CPU"
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.window = max(2, IN_FLIGHT_PER_CPU * cpus)

    def preflight(self) -> None:
        """The control kernel on every live node that can take an evaluation, each pinned to its node, all at once;
        InfrastructureError naming the first node where it fails (or that could not run it)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [node for node in self.ray.nodes()
                 if node.get("Alive") and node.get("Resources", {}).get(self._evaluation_resource, 0) >= 1]  # fmt: skip
        if not nodes:
            raise InfrastructureError(f"no node of the Ray cluster has a {self._evaluation_resource} to evaluate on")
        checks = {}
        for node in nodes:
            pinned = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
            checks[node.get("NodeManagerAddress", node["NodeID"])] = self._control.options(
                scheduling_strategy=pinned
            ).remote(self.engine, self.options)
        for where, ref in checks.items():
            try:
                failed = self.ray.get(ref)
            except self.ray.exceptions.RayError as exc:
                failed = failure_reason(exc)
            if failed is not None:
                raise InfrastructureError(f"Ray node {where}: {failed}")

    def _connect(self, address: str | None) -> None:
        # Without an address, a Ray of our own: "local", because ray.init() alone joins a cluster that
        # `ray start` left on this machine (or RAY_ADDRESS names), which may run another checkout's code.
        if address:
            check_reachable(address)
        term_handler = signal.getsignal(signal.SIGTERM)
        try:
            self.ray.init(
                address=address or "local",
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.WARNING,
                runtime_env={"env_vars": worker_environment()},
            )
        except ConnectionError as exc:
            raise UsageError(f"cannot reach the Ray cluster at {address}: {exc}") from None
        self._owns_ray = True
        # ray.init replaces the SIGTERM handler with its core's, which aborts the process (exit 134: no cleanup,
        # the run left "running"); the build's own (an interrupted run, recorded as such, Ray shut down) goes back.
        if term_handler is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, term_handler)

    def stream(self, pairs: Iterable[tuple[Candidate, Task]]) -> Iterator[Any]:
        ray = self.ray
        pending: dict[Any, tuple[Candidate, Task]] = {}
        source = iter(pairs)
        exhausted = False
        try:
            while True:
                while not exhausted and len(pending) < self.window:
                    try:
                        candidate, task = next(source)
                    except StopIteration:
                        exhausted = True
                        break
                    compiled = self._compile.remote(self.engine, candidate, task, self.options)
                    ref = self._evaluate.remote(self.engine, compiled, candidate, task, self.options)
                    pending[ref] = (candidate, task)
                if not pending:
                    return
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    candidate, task = pending.pop(ref)
                    try:
                        item = ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        item = InfrastructureFailure(candidate, task, failure_reason(exc))
                    yield stamped(item, self.stand_in)
        finally:
            for ref in pending:  # the build stopped early: nobody will read these
                ray.cancel(ref, force=True)

    def close(self) -> None:
        if self._owns_ray:
            self.ray.shutdown()
