"""The interface every generator shares.

A generator turns tasks into candidates. `Generator.run(tasks)` is a Python generator: it yields
`list[Candidate]` batches and receives, through `.send()`, the `list[KernelRecord]` the verifier made
of the batch it just yielded (any order; matched by kernel_id). Bundled and import generators yield
once; the LLM generator yields once per round, so later rounds can read the verdicts of earlier ones.

Some generators create tasks of their own (an import of a foreign archive brings its reference code,
an LLM-written functional form replaces a task without one). The driver asks `task_for(candidate)`
first and falls back to its suite when it answers None.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from collections.abc import Generator as PyGenerator
from typing import Any

from builder.candidates import Candidate
from builder.tasks import Task

CandidateStream = PyGenerator[list[Candidate], "list[Any] | None", None]


class Generator(ABC):
    """Base class: subclasses implement `run`; `generated_tasks` holds tasks they created."""

    name: str = "generator"

    def __init__(self) -> None:
        # task id -> Task written by this generator (imported references, LLM functional forms)
        self.generated_tasks: dict[str, Task] = {}
        # source_ref -> Task, for imports where two sources disagree on the reference of one task id
        self._task_by_ref: dict[str, Task] = {}
        # one line per thing the generator chose not to turn into a candidate, with the reason
        self.notes: list[str] = []

    @abstractmethod
    def run(self, tasks: Sequence[Task]) -> CandidateStream:
        """Yield candidate batches; receive the records of each batch via .send()."""

    def secrets(self) -> list[str]:
        """The secret values this generator holds (API keys), which no stored record may show."""
        return []

    def task_for(self, candidate: Candidate) -> Task | None:
        """The task this generator created for `candidate`, or None (the driver's suite has it)."""
        if candidate.source_ref and candidate.source_ref in self._task_by_ref:
            return self._task_by_ref[candidate.source_ref]
        return self.generated_tasks.get(candidate.task_id)


def drive(
    generator: Generator,
    tasks: Sequence[Task],
    verify_batch: Callable[[list[Candidate]], list[Any]],
) -> list[Any]:
    """Run a generator to the end, verifying each batch with `verify_batch`; returns every record.

    The pipeline has its own driver (store, resume, parallel verification); this one serves tests,
    scripts and small runs.
    """
    records: list[Any] = []
    stream = generator.run(tasks)
    try:
        batch = next(stream)
        while True:
            batch_records = verify_batch(batch)
            records.extend(batch_records)
            batch = stream.send(batch_records)
    except StopIteration:
        pass
    return records
