"""Build progress: counters the orchestrator updates, a rich live view, and the final summary table."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from builder import config
from schemas import STATUSES


@dataclass
class BuildCounters:
    """What a build has done so far; the live view, progress.json and the summary all read this."""

    started: float = field(default_factory=time.monotonic)
    generated: int = 0  # candidates the generator produced (after de-duplication)
    resumed: int = 0  # already in the store from an earlier run: skipped
    submitted: int = 0  # handed to the executor
    stored: int = 0  # finished and committed in this run
    no_task: int = 0  # candidates naming a task the run does not have
    machinery_failures: int = 0  # pairs handed back because the builder's machinery failed (retried, no record)
    waiting: int = 0  # pairs whose last try the machinery failed, now waiting for their next
    held: int = 0  # outcomes made, held until the control kernel has passed (pipeline/control_gate.py)
    control: dict[str, float] = field(default_factory=dict)  # when the control was judged, its compile and eval seconds
    by_status: Counter = field(default_factory=Counter)
    by_level_status: Counter = field(default_factory=Counter)  # (level, status) -> n
    compile_s: float = 0.0
    eval_s: float = 0.0

    def add(self, record: Any) -> None:
        self.stored += 1
        self.by_status[record.status] += 1
        self.by_level_status[(record.level, record.status)] += 1
        self.compile_s += record.compile_s or 0.0
        self.eval_s += record.eval_s or 0.0

    @property
    def in_flight(self) -> int:
        return self.submitted - self.stored - self.machinery_failures

    @property
    def remaining(self) -> int:
        """Candidates of the generator's batches so far that are not stored yet (queued or in flight)."""
        return max(0, self.generated - self.resumed - self.no_task - self.stored)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def kernels_per_hour(self) -> float:
        return self.stored / self.elapsed_s * 3600 if self.elapsed_s > 0 else 0.0

    def eta_s(self) -> float | None:
        rate = self.stored / self.elapsed_s if self.elapsed_s > 0 else 0.0
        return self.remaining / rate if rate > 0 else None

    def correct_rate(self) -> float | None:
        return self.by_status["correct"] / self.stored if self.stored else None

    def snapshot(self) -> dict[str, Any]:
        return {
            "generated": self.generated,
            "resumed": self.resumed,
            "submitted": self.submitted,
            "stored": self.stored,
            "in_flight": self.in_flight,
            "remaining": self.remaining,
            "no_task": self.no_task,
            "machinery_failures": self.machinery_failures,
            "waiting": self.waiting,
            "held": self.held,
            "control": dict(self.control),
            "by_status": dict(self.by_status),
            "elapsed_s": round(self.elapsed_s, 3),
            "kernels_per_hour": round(self.kernels_per_hour(), 2),
            "compile_s": round(self.compile_s, 3),
            "eval_s": round(self.eval_s, 3),
        }


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def live_table(counters: BuildCounters) -> Table:
    table = Table(title="kernel-archive build", box=None, show_header=True)
    for name in ("generated", "resumed", "queued", "compiling/evaluating", "stored", "kernels/h", "correct", "ETA"):
        table.add_column(name, justify="right")
    table.add_row(
        str(counters.generated),
        str(counters.resumed),
        str(counters.remaining - counters.in_flight),
        str(counters.in_flight),
        str(counters.stored),
        f"{counters.kernels_per_hour():.0f}",
        _percent(counters.correct_rate()),
        _duration(counters.eta_s()),
    )
    return table


def status_table(counters: BuildCounters) -> Table:
    table = Table(box=None)
    for status in STATUSES:
        table.add_column(status, justify="right")
    table.add_row(*(str(counters.by_status.get(s, 0)) for s in STATUSES))
    return table


def summary_table(counters: BuildCounters) -> Table:
    """Per-level verdict counts of this run, with throughput and compile-vs-evaluation time."""
    table = Table(title="build summary (this run)")
    table.add_column("level", justify="right")
    for status in STATUSES:
        table.add_column(status, justify="right")
    table.add_column("total", justify="right")
    levels = sorted({level for level, _ in counters.by_level_status})
    for level in levels:
        row = [counters.by_level_status.get((level, s), 0) for s in STATUSES]
        table.add_row(str(level), *map(str, row), str(sum(row)))
    totals = [counters.by_status.get(s, 0) for s in STATUSES]
    table.add_row("all", *map(str, totals), str(sum(totals)), style="bold")
    table.caption = (
        f"{counters.stored} stored, {counters.resumed} resumed from earlier runs, "
        f"{counters.kernels_per_hour():.0f} kernels/h over {_duration(counters.elapsed_s)}; "
        f"compile {counters.compile_s:.1f}s, evaluation {counters.eval_s:.1f}s (summed over workers)"
    )
    return table


class ProgressView:
    """A rich Live view when the console is a terminal; plain occasional lines otherwise (CI logs)."""

    def __init__(self, counters: BuildCounters, console: Console | None = None, enabled: bool = True):
        self.counters = counters
        self.console = console or Console(stderr=True)
        self.enabled = enabled
        self._live: Live | None = None
        self._last_line = 0.0

    def __enter__(self) -> ProgressView:
        if self.enabled and self.console.is_terminal:
            self._live = Live(self._render(), console=self.console, refresh_per_second=config.PROGRESS_REFRESH_PER_S)
            self._live.__enter__()
        return self

    def _render(self) -> Group:
        return Group(live_table(self.counters), status_table(self.counters))

    def update(self) -> None:
        if self._live is not None:
            self._live.update(self._render())
        elif self.enabled and time.monotonic() - self._last_line > 30:
            self._last_line = time.monotonic()
            c = self.counters
            self.console.print(
                f"build: {c.stored} stored, {c.in_flight} in flight, {c.kernels_per_hour():.0f} kernels/h, "
                f"correct {_percent(c.correct_rate())}, ETA {_duration(c.eta_s())}"
            )

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None
        if self.enabled:
            self.console.print(summary_table(self.counters))
