"""Ray executor (optional extra `ray`): a node engine per Ray node, fed by the build, which stays the store's only
writer.

Each node that can evaluate (a GPU on the CUDA backend, a CPU on the CPU backend) gets one `NodeEngine` actor
(`ray_node_engine.py`): the local executor's engine over the GPUs Ray assigns it there, with its compile pool,
pre-started children and shared references and baselines. The build hands each node pairs as its engine reads
them and takes the records back in completion order. Workers import the project from this checkout's path (and
the driver's PYTHONPATH), so every node needs the same checkout at the same path; builds are content-addressed in
each node's compile cache.

Before the first candidate every node engine runs the engine's control kernel: a node that cannot verify a
known-good kernel stops the build with one line before anything is stored. A node that joins later gets an engine
once its control passes (a stream looks every `RAY_NODE_SCAN_S`); one whose control fails is left out, and said so.

A node engine that is lost (its actor killed, its node gone, the engine raising) says nothing about the kernels it
held, which ran only in the engine's sandboxed children: each pair it held comes back as an
`InfrastructureFailure`, one incident for all of them, which the build puts back in its queue, never as a record.
Where every engine is lost with pairs left, each live node without one gets a new engine at once (once a
stream); the next stream starts one wherever a live node has none.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from builder import config
from builder.candidates import Candidate
from builder.errors import InfrastructureError, UsageError
from builder.pipeline.engine_access import ExecutorSettings, VerifierFactory, real_verifier, stamped, stand_in_name
from builder.pipeline.ray_node_engine import NodeEngine
from builder.tasks import Task
from builder.verify.engine.infrastructure import InfrastructureFailure

log = logging.getLogger(__name__)

Pair = tuple[Candidate, Task]


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
    return f"the Ray node engine failed: {lines[-1].strip() if lines else type(exc).__name__}"


@dataclass(eq=False)
class _Engine:
    """The build's view of one node engine during a stream."""

    node_id: str
    where: str  # the node's address, for messages
    actor: Any
    pending: dict[tuple[str, str], Pair] = field(default_factory=dict)  # handed over, no record back yet
    queued: int = 0  # handed over, not yet read by its stream
    told_end: bool = False
    over: bool = False


class RayExecutor:
    name = "ray"

    def __init__(self, options: Any, settings: ExecutorSettings, make_verifier: VerifierFactory = real_verifier):
        """`make_verifier(options, settings)` makes each node engine's verifier in its actor: the real engine's
        `Verifier` by default; a stand-in must be importable by Ray's workers, and its records carry its name."""
        try:
            import ray
        except ImportError:
            raise UsageError("--executor ray needs Ray: pip install 'verified-kernel-archive[ray]'") from None
        self.ray = ray
        self.options = options
        self.settings = settings
        self.make_verifier = make_verifier
        self.stand_in = None if make_verifier is real_verifier else stand_in_name(make_verifier)
        self._owns_ray = False
        if not ray.is_initialized():
            self._connect(settings.ray_address)
        self._resource = "GPU" if settings.backend == "cuda" else "CPU"
        self._actor = ray.remote(max_restarts=0, max_concurrency=1)(NodeEngine)
        self.engines: dict[str, _Engine] = {}  # node id -> its engine
        self.left_out: dict[str, str] = {}  # node id -> why its control kernel failed (mid-build joins)
        self._scanned_at = float("-inf")

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

    # Node engines: started per live node, each after its control kernel passed.

    def _evaluating_nodes(self) -> list[dict[str, Any]]:
        return [node for node in self.ray.nodes()
                if node.get("Alive") and node.get("Resources", {}).get(self._resource, 0) >= 1]  # fmt: skip

    def _start(self, node: dict[str, Any]) -> tuple[_Engine, Any]:
        """An engine actor pinned to `node`, holding its GPUs (at most --gpus), and the ref of its control check."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        resources = node.get("Resources", {})
        gpus = int(resources.get("GPU", 0)) if self._resource == "GPU" else 0
        if gpus and self.settings.gpus:
            gpus = min(gpus, self.settings.gpus)
        pinned = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
        actor = self._actor.options(num_cpus=0 if gpus else 1, num_gpus=gpus, scheduling_strategy=pinned).remote(
            self.make_verifier, self.options, replace(self.settings, gpus=None)
        )
        engine = _Engine(node["NodeID"], node.get("NodeManagerAddress", node["NodeID"]), actor)
        return engine, actor.preflight.remote()

    def _control_failure(self, engine: _Engine, check: Any) -> str | None:
        """Why the engine's control check failed (or it could not run), or None."""
        try:
            return self.ray.get(check, timeout=config.RAY_ENGINE_START_TIMEOUT_S)
        except (self.ray.exceptions.RayError, self.ray.exceptions.GetTimeoutError) as exc:
            return failure_reason(exc)

    def preflight(self) -> None:
        """An engine on every live node that can evaluate, each through the control kernel, all at once;
        InfrastructureError naming the first node where it fails (or that could not run it)."""
        nodes = self._evaluating_nodes()
        if not nodes:
            raise InfrastructureError(f"no node of the Ray cluster has a {self._resource} to evaluate on")
        started = [self._start(node) for node in nodes if node["NodeID"] not in self.engines]
        failures = [(engine, self._control_failure(engine, check)) for engine, check in started]
        for engine, _ in failures:
            self.engines[engine.node_id] = engine
        for engine, failed in failures:
            if failed is not None:
                raise InfrastructureError(f"Ray node {engine.where}: {failed}")
        self._scanned_at = time.monotonic()

    def _start_missing(self, starting: Iterable[_Engine] = (), skip: Iterable[str] = ()) -> list[tuple[_Engine, Any]]:
        """Engines for live nodes that have none, none `starting`, were not left out and are not in `skip` (their
        control checks still running)."""
        self._scanned_at = time.monotonic()
        known = {*self.engines, *self.left_out, *(engine.node_id for engine in starting), *skip}
        return [self._start(node) for node in self._evaluating_nodes() if node["NodeID"] not in known]

    def _drop(self, engine: _Engine) -> None:
        if self.engines.get(engine.node_id) is engine:
            del self.engines[engine.node_id]
        try:
            self.ray.kill(engine.actor)
        except Exception as exc:  # noqa: BLE001 - already gone with its node
            log.debug("node engine on %s: %s", engine.where, exc)

    # A stream: pairs handed out as the engines read them, records back in completion order.

    def stream(self, pairs: Iterable[Pair]) -> Iterator[Any]:
        """One record (or InfrastructureFailure) per pair, in completion order, from every live node's engine."""
        ray = self.ray
        active = [engine for engine in list(self.engines.values()) if self._begin(engine)]
        for engine, check in self._start_missing():  # for engines lost since, and nodes that joined since
            if self._admit(engine, self._control_failure(engine, check)) and self._begin(engine):
                active.append(engine)
        if not active:
            raise InfrastructureError(f"no node of the Ray cluster has a {self._resource} to evaluate on")
        feed = _Feed(iter(pairs))
        calls: dict[Any, _Engine] = {}  # exchange refs in flight, one per engine
        starting: dict[Any, _Engine] = {}  # control checks of engines for nodes that joined meanwhile
        rescued: set[str] = set()  # nodes given an engine at once when every engine was lost with pairs left
        for engine in active:
            calls[self._exchange(engine, feed)] = engine
        try:
            while calls or starting:
                done, _ = ray.wait([*calls, *starting], num_returns=1, timeout=config.RAY_NODE_SCAN_S)
                if done and done[0] in starting:
                    engine = starting.pop(done[0])
                    admitted = self._admit(engine, self._control_failure(engine, done[0]))
                    if admitted and not feed.exhausted and self._begin(engine):
                        active.append(engine)
                        calls[self._exchange(engine, feed)] = engine
                elif done:
                    engine = calls.pop(done[0])
                    yield from self._exchanged(engine, done[0])
                    if not engine.over:  # over: its stream ended (every pair it held accounted for) or it was lost
                        calls[self._exchange(engine, feed)] = engine
                if not calls and not starting and not feed.exhausted:  # every engine lost, pairs left
                    starting.update(self._rescue(rescued))
                    if not starting:
                        yield from self._nobody_left(feed)
                if time.monotonic() - self._scanned_at >= config.RAY_NODE_SCAN_S and not feed.exhausted:
                    starting.update({check: engine for engine, check in self._start_missing(starting.values())})
        finally:  # stopped early: the streams under way are abandoned, with their engines
            for engine in [*(engine for engine in active if not engine.over), *starting.values()]:
                self._drop(engine)

    def _begin(self, engine: _Engine) -> bool:
        """A new stream on the engine; False (the engine dropped) where it is gone since its last stream."""
        engine.pending, engine.queued, engine.told_end, engine.over = {}, 0, False, False
        try:
            self.ray.get(engine.actor.begin.remote(), timeout=config.RAY_ENGINE_CALL_TIMEOUT_S)
        except (self.ray.exceptions.RayError, self.ray.exceptions.GetTimeoutError) as exc:
            log.warning("Ray node %s lost its engine between streams: %s", engine.where, failure_reason(exc))
            self._drop(engine)
            return False
        return True

    def _admit(self, engine: _Engine, failed: str | None) -> bool:
        if failed is None:
            self.engines[engine.node_id] = engine
            return True
        log.warning("Ray node %s is left out of this build: %s", engine.where, failed)
        self.left_out[engine.node_id] = failed
        self._drop(engine)
        return False

    def _exchange(self, engine: _Engine, feed: _Feed) -> Any:
        """Top the engine's queue up (or tell it the input's end) and ask for its records."""
        low_water = config.RAY_ENGINE_QUEUE_PAIRS // 2
        handed = feed.take(config.RAY_ENGINE_QUEUE_PAIRS - engine.queued) if engine.queued < low_water else []
        for candidate, task in handed:
            engine.pending[(task.id, candidate.kernel_id)] = (candidate, task)
        engine.queued += len(handed)
        end = feed.exhausted and not engine.told_end
        engine.told_end |= end
        refill_below = 0 if feed.exhausted else low_water
        return engine.actor.exchange.remote(handed, end, refill_below, config.RAY_EXCHANGE_WAIT_S)

    def _exchanged(self, engine: _Engine, ref: Any) -> Iterator[Any]:
        """The records an exchange brought back; where the engine is lost or failed, its pairs as failures."""
        try:
            items, engine.queued, engine.over, failed = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            yield from self._lost(engine, failure_reason(exc))
            return
        for item in items:
            engine.pending.pop((item.task_id, item.kernel_id), None)
            yield stamped(item, self.stand_in)
        if failed is not None or (engine.over and engine.pending):
            yield from self._lost(engine, f"the Ray node engine failed: {failed or 'its stream ended early'}")

    def _lost(self, engine: _Engine, reason: str) -> Iterator[InfrastructureFailure]:
        log.warning("Ray node %s lost its engine with %d pairs: %s", engine.where, len(engine.pending), reason)
        self._drop(engine)
        engine.over = True
        incident = f"Ray node engine {engine.where} {uuid.uuid4().hex[:8]}"
        held, engine.pending = list(engine.pending.values()), {}
        for candidate, task in held:
            yield InfrastructureFailure(candidate, task, f"{reason} (on node {engine.where})", incident)

    def _rescue(self, rescued: set[str]) -> dict[Any, _Engine]:
        """Every engine lost with pairs left: at once (not at the next scan) an engine, checked as any other, for
        each live node that has none, its lost engine's node among them. Once a stream a node: where engines keep
        failing, the pairs left come back to the build rather than go from engine to engine."""
        started = self._start_missing(skip=rescued)
        rescued.update(engine.node_id for engine, _ in started)
        return {check: engine for engine, check in started}

    def _nobody_left(self, feed: _Feed) -> Iterator[InfrastructureFailure]:
        incident = f"no Ray node engine left {uuid.uuid4().hex[:8]}"
        for candidate, task in feed.take(None):
            yield InfrastructureFailure(candidate, task, "no Ray node engine was left to verify it", incident)

    def close(self) -> None:
        for engine in list(self.engines.values()):
            self._drop(engine)
        if self._owns_ray:
            self.ray.shutdown()


class _Feed:
    """The stream's input, read as engines ask for pairs."""

    def __init__(self, pairs: Iterator[Pair]) -> None:
        self.pairs = pairs
        self.exhausted = False

    def take(self, count: int | None) -> list[Pair]:
        """Up to `count` pairs (None: all that are left)."""
        taken: list[Pair] = []
        while not self.exhausted and (count is None or len(taken) < count):
            try:
                taken.append(next(self.pairs))
            except StopIteration:
                self.exhausted = True
        return taken
