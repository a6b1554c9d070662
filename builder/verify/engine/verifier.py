"""The verification engine's entry points (trusted parent side): one kernel (`verify`, `evaluate_compiled`) and a
stream of them (`Verifier.stream`), whose scheduler wires the stages of `stages.py` to the devices.

One GPU (or the CPU): the stages run as threads of this process. Several GPUs: one engine process per GPU, each a
`Verifier` over its GPU running the same stages, fed and gathered by `device_engines`. Candidate code never runs in
this process: it runs only in sandboxed children (`child/`), started by module name.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator

from builder import config
from builder.candidates import Candidate
from builder.errors import InfrastructureError
from builder.tasks import Task
from builder.verify import environment, milestones
from builder.verify.compile.extension import (
    CompileResult,
)
from builder.verify.engine import device_engines, preflight
from builder.verify.engine.baseline_cache import BaselineCache
from builder.verify.engine.channels import Channel
from builder.verify.engine.clean_reference import ReferenceCache
from builder.verify.engine.device_gate import keep_timing_cores
from builder.verify.engine.hand_back import UnstartedWork
from builder.verify.engine.infrastructure import InfrastructureFailure
from builder.verify.engine.one_kernel import (
    compile_candidate,
    finish_record,
    start_evaluation,
)
from builder.verify.engine.stages import CompileStage, EvaluateStage, FinishStage, PrepareStage, Stage, device_options
from builder.verify.options import VerifyOptions
from builder.verify.sandbox.pool import PooledChild
from schemas import KernelRecord

log = logging.getLogger(__name__)


def evaluate_compiled(compiled: CompileResult, candidate: Candidate, task: Task, options: VerifyOptions,
                      pooled: PooledChild | None = None, baselines: BaselineCache | None = None,
                      references: ReferenceCache | None = None) -> KernelRecord | InfrastructureFailure:  # fmt: skip
    """Evaluate a compiled candidate in a fresh sandboxed child, judge it against the task's clean reference
    (computed once per task by `references`) and assemble its record."""
    evaluated = start_evaluation(compiled, candidate, task, options, pooled, references, preflight.confirm)
    return finish_record(evaluated, baselines)


def verify(candidate: Candidate, task: Task, options: VerifyOptions) -> KernelRecord:
    """Compile and evaluate one candidate (what `kernel-archive verify` runs); InfrastructureError where the
    machinery, not the candidate, failed."""
    options = options.with_seeds()
    record = evaluate_compiled(compile_candidate(candidate, task, options), candidate, task, options)
    if isinstance(record, InfrastructureFailure):
        raise InfrastructureError(f"{candidate.kernel_name} was not verified: {record.reason}")
    return record


class Verifier:
    """Many candidates: a compile pool on the CPU cores pipelined with evaluation workers, several per GPU."""

    def __init__(self, options: VerifyOptions) -> None:
        options = options.with_seeds()  # one draw per build: every candidate sees the same trials
        self.engine_devices = device_engines.engine_devices(options)
        # Where the stream's cores and GPUs are known: one engine's share, or several engines' whole, of this
        # process's cores (a Ray node engine's are its node's).
        gpus = (len(self.engine_devices) or max(1, environment.gpu_count())) if options.backend == "cuda" else 0
        gpu_gib = environment.gpu_memory_gib(options.device_index) if gpus == 1 else None  # bounds its children
        self.options = options.with_workers_for(len(os.sched_getaffinity(0)), gpus, gpu_gib)
        if self.options.backend == "cuda" and not self.engine_devices:  # engine processes keep their own
            keep_timing_cores(self._devices(), config.TIMING_CORES_PER_GPU)
        self.baselines = BaselineCache(self.options.baseline_cache_dir)
        self.references = ReferenceCache(disk_share=self.options.disk_share)
        self._built: UnstartedWork | None = None  # the running stream's built pairs no worker has taken

    def preflight(self) -> None:
        """The control kernel through this machinery before the first candidate (`preflight.preflight`)."""
        preflight.preflight(self.options)

    def control(self) -> preflight.StreamControl | None:
        """The control kernel to lead this machinery's stream, where it has not passed here lately."""
        return preflight.StreamControl.unless_passed_lately(self.options)

    def _devices(self) -> int:
        return max(1, environment.gpu_count()) if self.options.backend == "cuda" else 1

    def hand_back(self, count: int) -> list[tuple[Candidate, Task]]:
        """Up to `count` pairs of the running stream that no evaluation worker has taken, built (`hand_back`):
        removed from this stream, which makes no record of them."""
        built = self._built
        if built is None:
            return []
        taken = built.take_back(count, lambda item: not Channel.is_end(item) and item.compiled.ok,
                                group=lambda item: item.task.id)  # fmt: skip
        return [(item.candidate, item.task) for item in taken]

    def stream(self, pairs: Iterable[tuple[Candidate, Task]]) -> Iterator[KernelRecord]:
        """Yield one record per (candidate, task), in completion order."""
        if self.engine_devices:
            cores = sorted(os.sched_getaffinity(0))
            yield from device_engines.stream(self.options, pairs, self.engine_devices, cores)
            return
        milestones.mark("stream_started")
        wiring = _Wiring(self, iter(pairs))
        self._built = wiring.built
        try:
            yield from wiring.records()
        finally:
            wiring.close()
            self._built = None


class _Wiring:
    """One stream's stages and the channels between them, in this process: the compile and prepare stages, an
    evaluation worker per device slot (`workers_per_device` on each device) and as many finishers."""

    def __init__(self, verifier: Verifier, pairs: Iterator[tuple[Candidate, Task]]) -> None:
        options = verifier.options
        devices = verifier._devices()
        workers = devices * options.workers_per_device()
        self.stop = threading.Event()
        self.outputs: Channel[KernelRecord | InfrastructureFailure] = Channel(self.stop, producers=2 * workers)
        self.built = UnstartedWork(self.stop, consumers=workers, maxsize=max(2, workers * options.batch_size))
        tasks: Channel[Task] = Channel(self.stop)
        evaluated: Channel = Channel(self.stop, producers=workers, consumers=workers)
        self.prepare = PrepareStage(options, tasks, verifier.references, verifier.baselines, self.outputs)
        self.evaluators = [EvaluateStage(device_options(options, index % devices), self.built, evaluated,
                                         self.outputs, verifier.references, preflight.confirm)
                           for index in range(workers)]  # fmt: skip
        self.stages: list[Stage] = [CompileStage(options, pairs, self.built, tasks, self.outputs), self.prepare,
                                    *self.evaluators,
                                    *(FinishStage(evaluated, self.outputs, verifier.baselines) for _ in range(workers))]  # fmt: skip
        self.threads: list[threading.Thread] = []

    def records(self) -> Iterator[KernelRecord]:
        self.threads = [stage.start(f"-{index}") for index, stage in enumerate(self.stages)]
        while (item := self.outputs.receive()) is not None:
            if isinstance(item, BaseException):
                raise item
            milestones.mark("first_record")
            yield item

    def close(self) -> None:
        """Stop every stage (each channel's waits end at once), and kill the pre-started children."""
        self.stop.set()
        for stage in self.evaluators:
            stage.close()
        self.prepare.close()
        started = time.monotonic()
        for thread in self.threads:
            thread.join(timeout=max(0.1, config.SANDBOX_KILL_GRACE_S - (time.monotonic() - started)))
