"""The build orchestrator: tasks -> generator -> executor (compile + verify + profile) -> store.

The orchestrator is the only writer of the store. Every finished record is committed on its own as it
arrives, so a `kill -9` loses only kernels in flight; rerunning the same command skips the
(task_id, kernel_id) pairs already stored (their stored records are still handed back to the generator,
so an LLM run resumes with the verdicts it had).

A known-good control kernel goes through the real machinery first (builder/verify/engine/preflight.py): at the
front of the first stream where the executor offers it (`control_gate.py`: nothing is stored until it has passed),
else as the executor's preflight before the first candidate. A pair whose try the builder's own machinery failed
(the executor yields an `InfrastructureFailure`, never a record) is noted in the store's `waiting` table and tried
again; after `config.INFRA_CONSECUTIVE_FAILURES_MAX` such failures in a row the build stops with
`ExitCode.INFRASTRUCTURE`.
"""

from __future__ import annotations

import os
import platform
import secrets
import signal
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

from builder import config
from builder.candidates import Candidate
from builder.errors import InfrastructureError, NoGpuError, UsageError
from builder.pipeline.control_gate import ControlGate
from builder.pipeline.engine_access import ExecutorSettings, VerifierFactory, make_verify_options, real_verifier
from builder.pipeline.executors import make_executor
from builder.pipeline.progress import BuildCounters, ProgressView
from builder.pipeline.store import Store, write_progress_snapshot
from builder.tasks import Task, load_suite
from builder.verify.engine.infrastructure import InfrastructureFailure

GENERATOR_CHOICES = ("auto", "bundled", "llm", "import")


@dataclass
class BuildParams:
    out: Path
    generator: str = "auto"
    suite: Path | None = None
    levels: list[int] | None = None
    tasks: str | None = None
    backend: str = "cuda"
    gpus: int | None = None
    compile_workers: int | None = None
    eval_workers: int | None = None  # per GPU; None: the Verifier applies config.eval_workers_for on its node
    executor: str = "local"
    ray_address: str | None = None
    trials: int = config.DEFAULT_TRIALS
    profile: bool | None = None  # None: profile on cuda, not on cpu
    source: str | None = None  # --generator import
    llm_options: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["out"] = str(self.out)
        data["suite"] = str(self.suite) if self.suite else None
        data["llm_options"] = {k: v for k, v in self.llm_options.items() if k != "api_key"}  # never store a key
        return data


def resolve_generator(name: str, environ: dict[str, str] | None = None) -> str:
    """`auto` = llm when an OpenAI-compatible endpoint is configured (OPENAI_BASE_URL or KA_MODEL), else bundled."""
    if name not in GENERATOR_CHOICES:
        raise UsageError(f"unknown generator '{name}' (expected one of {', '.join(GENERATOR_CHOICES)})")
    if name != "auto":
        return name
    env = os.environ if environ is None else environ
    return "llm" if env.get("OPENAI_BASE_URL") or env.get("KA_MODEL") else "bundled"


def parse_levels(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        levels = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UsageError(f"--levels {text!r}: expected comma-separated level numbers like 1,2,3") from None
    if not levels or min(levels) < 1:
        raise UsageError(f"--levels {text!r}: levels are positive integers")
    return levels


def _check_backend(params: BuildParams, make_verifier: VerifierFactory) -> None:
    if params.backend not in ("cuda", "cpu"):
        raise UsageError(f"unknown backend '{params.backend}' (expected cuda or cpu)")
    # The real engine needs a GPU here for a local CUDA build (a Ray cluster's are elsewhere; a stand-in needs none).
    if params.backend == "cuda" and params.executor == "local" and make_verifier is real_verifier:
        import torch

        if not torch.cuda.is_available():
            raise NoGpuError("no CUDA GPU visible: build on a GPU machine, or use --backend cpu for the CPU pipeline")


def host_info() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


class Orchestrator:
    def __init__(
        self,
        params: BuildParams,
        show_progress: bool = True,
        *,
        make_verifier: VerifierFactory = real_verifier,
    ):
        """`make_verifier` is what verifies, on either executor: the real engine unless a test or an experiment
        passes a stand-in (executors.py)."""
        self.params = params
        self.show_progress = show_progress
        self.make_verifier = make_verifier
        self.counters = BuildCounters()
        self.notes: list[str] = []
        self.failures_in_a_row = 0  # of the machinery, since the last stored record
        self._incidents_in_a_row: set[str] = set()  # each counted once however many pairs it cost
        self.gate = ControlGate(None)  # the control kernel leading the first stream, once the executor is made

    def _select_tasks(self) -> list[Task]:
        suite = load_suite(self.params.suite)
        chosen = suite.select(levels=self.params.levels, pattern=self.params.tasks)
        if not chosen:
            raise UsageError("no tasks match --levels/--tasks (see `kernel-archive tasks`)")
        return chosen

    def _make_generator(self, store: Store) -> Any:
        from builder.generate import create_generator

        name = resolve_generator(self.params.generator)
        archive = ()
        if name == "llm":
            archive = store.records_for(store.done_keys())
        return create_generator(
            name,
            backend=self.params.backend,
            out_dir=self.params.out / "generated",
            source=self.params.source,
            levels=self.params.levels,
            llm_options=self.params.llm_options,
            archive_records=archive,
        )

    def run(self) -> BuildCounters:
        params = self.params
        _check_backend(params, self.make_verifier)
        tasks = self._select_tasks()
        store = Store.open(params.out)
        try:
            seeds = [secrets.randbits(config.SEED_BITS) for _ in range(params.trials)]
            run = store.start_build(params.as_dict(), seeds, host_info())
            state = "failed"
            previous_term = signal.signal(signal.SIGTERM, _raise_interrupt)
            try:
                self._drive(store, tasks, seeds)
                state = "finished"
            except KeyboardInterrupt:
                state = "interrupted"
                raise
            finally:
                signal.signal(signal.SIGTERM, previous_term)
                store.finish_build(run.build_id, state, self.counters.snapshot())
                self._snapshot(state)
        finally:
            store.close()
        return self.counters

    def _drive(self, store: Store, tasks: list[Task], seeds: list[int]) -> None:
        params = self.params
        profile = params.profile if params.profile is not None else params.backend == "cuda"
        options = make_verify_options(
            params.backend,
            seeds,
            profile=profile,
            compile_workers=params.compile_workers,
            eval_workers=params.eval_workers,
            baseline_cache_dir=params.out / "baselines",
        )
        settings = ExecutorSettings(params.backend, params.gpus, params.compile_workers, params.ray_address)
        executor = make_executor(params.executor, options, settings, make_verifier=self.make_verifier)
        self.counters.waiting = len(store.waiting())  # left by an earlier run: tried again below
        try:
            control = getattr(executor, "control", None)
            self.gate = ControlGate(control() if callable(control) else None)
            preflight = getattr(executor, "preflight", None)
            if self.gate.open and callable(preflight):  # before any candidate: a broken machine stores nothing
                preflight()
            generator = self._make_generator(store)
            store.add_secrets(generator.secrets())
            by_id = {t.id: t for t in tasks}
            with ProgressView(self.counters, enabled=self.show_progress) as view:
                stream = generator.run(tasks)
                try:
                    batch = next(stream)
                    while True:
                        records = self._verify_batch(store, executor, generator, by_id, batch, view)
                        batch = stream.send(records)
                except StopIteration:
                    pass
        finally:
            executor.close()
        self.notes.extend(getattr(generator, "notes", []))

    def _verify_batch(
        self,
        store: Store,
        executor: Any,
        generator: Any,
        by_id: dict[str, Task],
        batch: list[Candidate],
        view: ProgressView,
    ) -> list[Any]:
        done = store.done_keys()
        unique: dict[tuple[str, str], Candidate] = {}
        for candidate in batch:
            unique.setdefault((candidate.task_id, candidate.kernel_id), candidate)
        self.counters.generated += len(unique)
        resumed = [key for key in unique if key in done]
        self.counters.resumed += len(resumed)
        records = store.records_for(resumed)
        pairs: list[tuple[Candidate, Task]] = []
        for key, candidate in unique.items():
            if key in done:
                continue
            task = generator.task_for(candidate) or by_id.get(candidate.task_id)
            if task is None:
                self.counters.no_task += 1
                self.notes.append(
                    f"{candidate.source_ref or candidate.kernel_name}: task {candidate.task_id} not in this build's tasks"
                )
                continue
            pairs.append((candidate, task))
        view.update()
        while pairs:  # the pairs the machinery failed go round again (a stored record ends a run of failures)
            failed: list[tuple[Candidate, Task]] = []
            control, pairs = self.gate.lead(pairs)
            submitted = self._submitted(pairs)
            for outcome in executor.stream(chain([control], submitted) if control else submitted):
                if self.gate.judges(outcome):
                    self.counters.control = {"judged_s": round(self.counters.elapsed_s, 3),
                                             "compile_s": outcome.compile_s or 0.0, "eval_s": outcome.eval_s or 0.0}  # fmt: skip
                for item in self.gate.release(outcome):
                    if isinstance(item, InfrastructureFailure):
                        failed.append((item.candidate, item.task))
                        self._machinery_failed(store, item)
                    else:
                        self._stored(store, item)
                        records.append(item)
                self.counters.held = len(self.gate.held)
                self._snapshot("running")
                view.update()
            self.gate.stream_ended()
            pairs = failed + self.gate.take_deferred()
        return records

    def _stored(self, store: Store, record: Any) -> None:
        self.failures_in_a_row = 0
        self._incidents_in_a_row.clear()
        if store.add_record(record):
            self.counters.add(record)
        if self.counters.waiting:  # the record took its pair off the waiting list
            self.counters.waiting = len(store.waiting())

    def _machinery_failed(self, store: Store, failure: InfrastructureFailure) -> None:
        """A pair the builder's machinery failed: noted as waiting (no record); the build stops after
        `config.INFRA_CONSECUTIVE_FAILURES_MAX` in a row, the pairs of one incident counting once."""
        store.note_waiting(failure.task_id, failure.kernel_id, failure.reason)
        self.counters.machinery_failures += 1
        self.counters.waiting = len(store.waiting())
        if failure.incident in self._incidents_in_a_row:
            return  # another pair of an incident already counted (an engine that ended holding several)
        if failure.incident is not None:
            self._incidents_in_a_row.add(failure.incident)
        self.failures_in_a_row += 1
        if self.failures_in_a_row >= config.INFRA_CONSECUTIVE_FAILURES_MAX:
            raise InfrastructureError(
                f"the build stopped: the builder's own machinery failed {self.failures_in_a_row} times in a row, "
                f"lately with {failure.kernel_name} on task {failure.task_id}: {failure.reason}; "
                f"{self.counters.waiting} pair(s) wait unrecorded (`kernel-archive status`), rerun the build to retry"
            )

    def _submitted(self, pairs: list[tuple[Candidate, Task]]) -> Iterator[tuple[Candidate, Task]]:
        # Counted as the executor pulls them, so "in flight" means handed over and not yet stored.
        for pair in pairs:
            self.counters.submitted += 1
            yield pair

    def _snapshot(self, state: str) -> None:
        write_progress_snapshot(self.params.out, {"state": state, "pid": os.getpid(), **self.counters.snapshot()})


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def run_build(
    params: BuildParams,
    show_progress: bool = True,
    *,
    make_verifier: VerifierFactory = real_verifier,
) -> Orchestrator:
    orchestrator = Orchestrator(params, show_progress, make_verifier=make_verifier)
    orchestrator.run()
    return orchestrator
