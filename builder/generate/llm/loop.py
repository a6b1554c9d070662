"""The `llm` generator: an agentic kernel engineer looping over translate, optimise and crossover.

Per task and per model, under the run's budget:
  0. a task without a functional form first gets one from the LLM, accepted only after a sandboxed
     check against the module form (functional.py);
  1. round 0 translates the functional reference into `samples_per_round` candidates;
  2. rounds 1.. draw parents from that (task, model)'s best attempts so far: even samples optimise
     one parent (its verdict and the verifier's feedback in the prompt), odd samples cross over the
     two best correct parents when there are two, else optimise the next-best parent;
  3. every prompt may carry verified kernels of similar tasks (archive.py) as examples.
Each round is one yielded batch; the records sent back feed the next round. Every attempt becomes a
candidate, failed ones too: a response without usable code (or a request that failed for good) is
kept as a source that stops the compiler with the reason and the raw response (extraction.py), so the
verifier records `compile_error` and the attempt's tokens and cost stay in the archive.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder import config
from builder.candidates import Candidate
from builder.errors import UsageError
from builder.generate.base import CandidateStream, Generator
from builder.generate.llm import prompts
from builder.generate.llm.archive import InnovationArchive
from builder.generate.llm.budgets import BudgetTracker
from builder.generate.llm.client import ChatClient, Completion
from builder.generate.llm.extraction import extract_kernel, extract_python, unusable_source
from builder.generate.llm.functional import accepted_task, check_functional_form, write_functional_task
from builder.generate.llm.settings import LLMSettings, ModelSpec
from builder.tasks import Task

log = logging.getLogger(__name__)

STATUS_RANK = {"correct": 0, "incorrect": 2, "runtime_error": 3, "timeout": 3, "crash": 3, "compile_error": 4}


@dataclass
class Request:
    task: Task
    model: ModelSpec
    kind: str  # translate | optimise | crossover
    round: int
    sample: int
    messages: list[dict[str, str]]
    parents: list[Candidate] = field(default_factory=list)


def _get(record: Any, name: str) -> Any:
    return record.get(name) if isinstance(record, dict) else getattr(record, name, None)


def rank_key(record: Any) -> tuple:
    """Best first: eligible correct by runtime, flagged correct, incorrect by max diff, runtime failures, compile errors."""
    status = _get(record, "status")
    rank = STATUS_RANK.get(status, 5)
    if status == "correct" and not _get(record, "ranking_eligible"):
        rank = 1
    runtime = _get(record, "runtime_ms")
    diff = _get(record, "max_diff")
    tiebreak = (
        runtime if rank <= 1 and runtime is not None else diff if rank == 2 and diff is not None else float("inf")
    )
    return (rank, tiebreak)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()[:40] or "model"


class LLMGenerator(Generator):
    name = "llm"

    def __init__(
        self,
        settings: LLMSettings,
        backend: str = "cuda",
        out_dir: Path | None = None,
        prompts_dir: Path | None = None,
        archive_records: Iterable[Any] = (),
        client_factory: Callable[[ModelSpec, int], ChatClient] | None = None,
        functional_check: Callable[..., Any] = check_functional_form,
    ) -> None:
        super().__init__()
        if backend not in ("cuda", "cpu"):
            raise UsageError(f"unknown backend '{backend}' (expected cuda or cpu)")
        self.settings = settings
        self.backend = backend
        self.language = "cuda" if backend == "cuda" else "cpp"
        self.out_dir = Path(out_dir) if out_dir is not None else config.CACHE_DIR / "llm"
        self.prompts_dir = prompts_dir
        self.experiment = settings.experiment or time.strftime("llm-%Y%m%d-%H%M%S", time.gmtime())
        self.tracker = BudgetTracker(settings.budget)
        factory = client_factory or (lambda spec, max_tokens: ChatClient(spec, default_max_tokens=max_tokens))
        self.clients = {spec.name: factory(spec, settings.budget.max_tokens) for spec in settings.models}
        self.functional_check = functional_check
        self.archive = InnovationArchive()
        for record in archive_records:
            self._offer(record)
        self.stop_reason: str | None = None
        self.functional_attempts: list[dict[str, Any]] = []
        self._populations: dict[tuple[str, str], dict[str, tuple[Candidate, Any]]] = {}

    # --- prompts -------------------------------------------------------------------------------
    def _base_values(self, task: Task) -> dict[str, Any]:
        return {
            "task_id": task.id,
            "task_name": task.name,
            "op_category": task.op_category,
            "reference_code": task.source.strip(),
            "contract": prompts.template(
                "contract_cuda" if self.backend == "cuda" else "contract_cpu", self.prompts_dir
            ).strip(),
            "fence": prompts.FENCES[self.language],
            "examples": self._examples(task),
        }

    def _examples(self, task: Task) -> str:
        chosen = self.archive.examples_for(task.id, task.name, task.op_category, self.language)
        return "".join(
            prompts.render(
                "example",
                {
                    "task_name": e.task_name,
                    "op_category": e.op_category,
                    "summary": e.summary,
                    "fence": prompts.FENCES[self.language],
                    "code": e.code.strip(),
                },
                self.prompts_dir,
            )
            for e in chosen
        )

    def _messages(self, name: str, values: dict[str, Any]) -> list[dict[str, str]]:
        system = prompts.render("system", {"language_name": prompts.LANGUAGE_NAMES[self.language]}, self.prompts_dir)
        return [
            {"role": "system", "content": system.strip()},
            {"role": "user", "content": prompts.render(name, values, self.prompts_dir)},
        ]

    # --- planning ------------------------------------------------------------------------------
    def _ranked(self, task: Task, model: ModelSpec) -> list[tuple[Candidate, Any]]:
        population = self._populations.get((task.id, model.name), {})
        return sorted(population.values(), key=lambda pair: rank_key(pair[1]))[: config.LLM_PARENTS_KEPT]

    def _plan(self, round_index: int, tasks: Sequence[Task]) -> list[Request]:
        requests: list[Request] = []
        for task in tasks:
            for model in self.settings.models:
                if round_index == 0:
                    for sample in range(self.settings.budget.samples_per_round):
                        messages = self._messages("translate", self._base_values(task))
                        requests.append(Request(task, model, "translate", 0, sample, messages))
                    continue
                ranked = self._ranked(task, model)
                if not ranked:
                    continue  # nothing came back for this lineage: nothing to improve on
                correct = [pair for pair in ranked if _get(pair[1], "status") == "correct"]
                for sample in range(self.settings.budget.samples_per_round):
                    if sample % 2 == 1 and len(correct) >= 2:
                        requests.append(self._crossover(task, model, round_index, sample, correct[0], correct[1]))
                    else:
                        parent = ranked[(sample // 2 + sample % 2) % len(ranked)]
                        requests.append(self._optimise(task, model, round_index, sample, parent))
        return requests

    def _optimise(self, task: Task, model: ModelSpec, round_index: int, sample: int, parent: tuple) -> Request:
        candidate, record = parent
        values = self._base_values(task) | {
            "parent_code": candidate.source.strip(),
            "parent_verdict": prompts.verdict_line(record),
            "feedback": prompts.feedback(record),
            "goal": prompts.goal(record),
        }
        return Request(task, model, "optimise", round_index, sample, self._messages("optimise", values), [candidate])

    def _crossover(self, task: Task, model: ModelSpec, round_index: int, sample: int, a: tuple, b: tuple) -> Request:
        values = self._base_values(task) | {
            "parent_a_code": a[0].source.strip(),
            "parent_a_summary": prompts.summary_line(a[1]),
            "parent_b_code": b[0].source.strip(),
            "parent_b_summary": prompts.summary_line(b[1]),
        }
        return Request(task, model, "crossover", round_index, sample, self._messages("crossover", values), [a[0], b[0]])

    # --- execution -----------------------------------------------------------------------------
    def _call(self, request: Request) -> Completion:
        completion = self.clients[request.model.name].complete(request.messages)
        self.tracker.charge(completion.prompt_tokens, completion.completion_tokens, completion.cost_usd)
        return completion

    def _execute(self, requests: list[Request]) -> list[tuple[Request, Completion]]:
        """Run requests with bounded concurrency; a spent budget stops new ones (results keep request order)."""
        done: dict[int, Completion] = {}
        limit = max(1, self.settings.budget.concurrency)
        with ThreadPoolExecutor(max_workers=limit) as pool:
            in_flight: dict[Future, int] = {}

            def collect(futures: Iterable[Future]) -> None:
                for future in futures:
                    done[in_flight.pop(future)] = future.result()

            for index, request in enumerate(requests):
                while len(in_flight) >= limit:
                    finished, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
                    collect(finished)
                reason = self.tracker.exhausted()
                if reason:
                    self.stop_reason = reason
                    self.notes.append(
                        f"stopped before round {request.round} sample {request.sample} of task {request.task.id}: {reason}"
                    )
                    break
                in_flight[pool.submit(self._call, request)] = index
            collect(wait(list(in_flight)).done)
        return [(requests[i], done[i]) for i in sorted(done)]

    def _candidate(self, request: Request, completion: Completion) -> Candidate:
        if completion.error:
            source = unusable_source(completion.text, f"request failed: {completion.error}", self.language)
        else:
            extraction = extract_kernel(completion.text)
            source = extraction.code or unusable_source(completion.text, extraction.reason or "unusable", self.language)
        model_slug = _slug(request.model.name)
        return Candidate(
            task_id=request.task.id,
            source=source,
            language=self.language,
            kernel_name=f"{model_slug}-r{request.round}-{request.kind}-s{request.sample}",
            generator="llm",
            model=request.model.name,
            experiment=self.experiment,
            parent_ids=[p.kernel_id for p in request.parents],
            round=request.round,
            source_ref=f"llm:{self.experiment}:{request.model.name}:{request.task.id}:r{request.round}:s{request.sample}",
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
            cost_usd=completion.cost_usd,
        )

    def _offer(self, record: Any) -> None:
        self.archive.offer(
            record, _get(record, "op_name") or "", _get(record, "op_category") or "other", prompts.summary_line(record)
        )

    def _absorb(self, pairs: list[tuple[Request, Candidate]], records: list[Any]) -> None:
        by_id = {_get(r, "kernel_id"): r for r in records}
        for request, candidate in pairs:
            record = by_id.get(candidate.kernel_id)
            if record is None:
                continue  # not verified (e.g. the driver skipped it): cannot be a parent
            self._populations.setdefault((request.task.id, request.model.name), {})[candidate.kernel_id] = (
                candidate,
                record,
            )
            self._offer(record)

    # --- functional forms ----------------------------------------------------------------------
    def _functional_form(self, task: Task) -> Task | None:
        module_code = task.source.strip()
        for attempt, model in enumerate(self.settings.models):
            if (reason := self.tracker.exhausted()) is not None:
                self.stop_reason = reason
                break
            messages = [
                {
                    "role": "user",
                    "content": prompts.render("functional", {"module_code": module_code}, self.prompts_dir),
                }
            ]
            completion = self.clients[model.name].complete(messages)
            self.tracker.charge(completion.prompt_tokens, completion.completion_tokens, completion.cost_usd)
            entry = {
                "task_id": task.id,
                "model": model.name,
                "prompt_tokens": completion.prompt_tokens,
                "completion_tokens": completion.completion_tokens,
                "cost_usd": completion.cost_usd,
            }
            extraction = extract_python(completion.text) if not completion.error else None
            if extraction is None or extraction.code is None:
                entry |= {"accepted": False, "reason": completion.error or (extraction.reason if extraction else "")}
                self.functional_attempts.append(entry)
                continue
            path = write_functional_task(task, extraction.code, self.out_dir, attempt)
            check = self.functional_check(task, path, self.backend)
            entry |= {"accepted": check.ok, "reason": check.reason, "path": str(path), "isolation": check.isolation}
            self.functional_attempts.append(entry)
            if check.ok:
                try:
                    return accepted_task(task, path)
                except UsageError as exc:  # the check passed a file the task parser rejects
                    entry |= {"accepted": False, "reason": str(exc)}
        self.notes.append(f"{task.id} {task.name}: no accepted functional form; task skipped")
        return None

    # --- the loop ------------------------------------------------------------------------------
    def secrets(self) -> list[str]:
        return self.settings.secrets()

    def run(self, tasks: Sequence[Task]) -> CandidateStream:
        usable: list[Task] = []
        for task in tasks:
            if task.has_functional:
                usable.append(task)
                continue
            functional = self._functional_form(task)
            if functional is not None:
                self.generated_tasks[task.id] = functional
                usable.append(functional)
        for round_index in range(self.settings.budget.rounds):
            if self.stop_reason:
                break
            requests = self._plan(round_index, usable)
            if not requests:
                break
            pairs = [(request, self._candidate(request, completion)) for request, completion in self._execute(requests)]
            if not pairs:
                break
            records = yield [candidate for _, candidate in pairs]
            self._absorb(pairs, list(records or []))
        log.info("llm generator %s: %s", self.experiment, self.tracker.summary())
