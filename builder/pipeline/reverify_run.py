"""`kernel-archive reverify`: re-verify an archive's kernels on this machine and report what held.

The archive is read through the import generator (ours in either config, the 18-column public schema,
KernelBench or manifest folders, a Hub id), so each kernel is verified against the task program it
carries, with its task id and kernel id as stored. Verification goes through the engine's
`Verifier(options).stream(pairs)` with fresh secret seeds; nothing is written to any build store.
The report (builder/pipeline/reverify.py) is written as report.md and report.json, the new records as
records.parquet, all in --out.
"""

from __future__ import annotations

import json
import platform
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from builder import config
from builder.candidates import Candidate
from builder.errors import InfrastructureError, NoGpuError, UsageError
from builder.pipeline.control_gate import ControlGate
from builder.pipeline.engine_access import ExecutorSettings, VerifierFactory, make_verify_options, real_verifier
from builder.pipeline.executors import make_executor
from builder.pipeline.reverify import build_report, render_markdown
from builder.redaction import known_secrets, redact_record
from builder.tasks import Task, load_suite
from builder.verify.engine.infrastructure import InfrastructureFailure

REPORT_JSON, REPORT_MD, RECORDS_PARQUET = "report.json", "report.md", "records.parquet"
PROGRESS_JSONL = "records.jsonl"  # one new record a line, appended as each arrives: a rerun resumes from it


@dataclass
class ReverifyParams:
    dataset: str
    out: Path | None = None  # None: default_out(dataset)
    backend: str | None = None  # None: cuda when a GPU is visible, else cpu
    tasks: str | None = None  # regular expression on task id or name
    limit: int | None = None
    trials: int = config.DEFAULT_TRIALS
    timeout_s: float | None = None  # None: the engine's default
    compile_workers: int | None = None
    eval_workers: int | None = None  # per GPU; None: the engine's rule
    progress: bool = True
    restart: bool = False  # True: forget the records a previous run left in --out
    report_only: bool = False  # True: verify nothing, report on the records a previous run left in --out


def default_out(dataset: str) -> Path:
    """A folder next to the dataset, named after it (`data/sample` -> `data/sample-reverify`)."""
    path = Path(dataset).expanduser()
    if path.exists():
        path = path.resolve()
        return path.parent / f"{path.stem if path.is_file() else path.name}{config.REVERIFY_OUT_SUFFIX}"
    return Path.cwd() / f"{dataset.rstrip('/').split('/')[-1]}{config.REVERIFY_OUT_SUFFIX}"  # a Hub id


def resolve_backend(backend: str | None) -> str:
    if backend not in (None, "cuda", "cpu"):
        raise UsageError(f"unknown backend '{backend}' (expected cuda or cpu)")
    import torch

    visible = torch.cuda.is_available()
    if backend == "cuda" and not visible:
        raise NoGpuError("no CUDA GPU visible: re-verify on a GPU machine, or use --backend cpu")
    return backend or ("cuda" if visible else "cpu")


def compile_pattern(pattern: str | None) -> re.Pattern | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"--tasks {pattern!r} is not a valid regular expression: {exc}") from None


def select_pairs(
    generator: Any, suite: dict[str, Task], pattern: re.Pattern | None, limit: int | None
) -> tuple[list[tuple[Candidate, Task]], int]:
    """(candidate, task) pairs to verify, in the archive's order, and how many were importable."""
    candidates: dict[tuple[str, str], Candidate] = {}
    for candidate in generator.candidates(list(suite.values())):
        candidates.setdefault((candidate.task_id, candidate.kernel_id), candidate)
    pairs = []
    for candidate in candidates.values():
        task = generator.task_for(candidate) or suite.get(candidate.task_id)
        if task is None:
            generator.notes.append(f"{candidate.source_ref}: task {candidate.task_id} is not in the built-in suite")
            continue
        if pattern is None or pattern.search(task.id) or pattern.search(task.name):
            pairs.append((candidate, task))
    return (pairs[:limit] if limit else pairs), len(candidates)


def _suite_tasks() -> dict[str, Task]:
    # Folder imports (KernelBench, manifest) name tasks of the built-in suite; archives bring their own.
    return {task.id: task for task in load_suite().tasks}


def run_reverify(params: ReverifyParams, make_verifier: VerifierFactory = real_verifier) -> tuple[dict[str, Any], Path]:
    """Re-verify, write the report files, return (report, out dir). `make_verifier`: the real engine unless a
    test or an experiment passes a stand-in (executors.py)."""
    from builder.generate.importers import ImportGenerator

    pattern = compile_pattern(params.tasks)
    out = Path(params.out) if params.out is not None else default_out(params.dataset)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: exists and is not a directory")
    if params.report_only and params.restart:
        raise UsageError("--report-only reports on the records in --out; --restart would forget them")
    if params.report_only:
        left = load_progress(out)
        if not left:
            raise UsageError(f"{out}: no records to report on (--report-only needs a previous run's records.jsonl)")
        backend = params.backend or ("cuda" if any(r.backend == "cuda" for r in left) else "cpu")
    else:
        backend = resolve_backend(params.backend)
    generator = ImportGenerator(params.dataset, backend=backend, out_dir=out / "tasks")
    pairs, importable = select_pairs(generator, _suite_tasks(), pattern, params.limit)
    if not pairs:
        why = f" (e.g. {generator.notes[0]})" if generator.notes else ""
        raise UsageError(f"{params.dataset}: no kernels to re-verify on the {backend} backend with these options{why}")
    if params.restart:
        (out / PROGRESS_JSONL).unlink(missing_ok=True)
    done = {(r.task_id, r.kernel_id): r for r in load_progress(out)}
    wanted = {(c.task_id, c.kernel_id) for c, _ in pairs}
    todo = [(c, t) for c, t in pairs if (c.task_id, c.kernel_id) not in done]
    verify_now = todo and not params.report_only
    records = [r for key, r in done.items() if key in wanted] + (
        _verify(todo, backend, params, out, make_verifier) if verify_now else []
    )
    context = {
        "dataset": params.dataset,
        "backend": backend,
        "machine": _machine(records, backend),
        "torch_version": next((r.torch_version for r in records if r.torch_version), None),
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "selection": {
            "importable": importable,
            "tasks": params.tasks,
            "limit": params.limit,
            "left_out": len(generator.notes),
            "not_verified": len(todo) if params.report_only else 0,
        },  # fmt: skip
        "notes": list(dict.fromkeys(generator.notes)),
    }
    report = build_report(records, generator.recorded, context)
    _write(out, report, records)
    return report, out


def _machine(records: list[Any], backend: str) -> str:
    gpu = next((r.gpu_name for r in records if getattr(r, "gpu_name", None)), None)
    return gpu if backend == "cuda" and gpu else f"{platform.processor() or platform.machine()} CPU"


def _verify(
    pairs: list[tuple[Candidate, Task]],
    backend: str,
    params: ReverifyParams,
    out: Path,
    make_verifier: VerifierFactory,
) -> list[Any]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from schemas import record_to_dict

    seeds = [secrets.randbits(config.SEED_BITS) for _ in range(params.trials)]
    options = make_verify_options(
        backend,
        seeds,
        profile=False,  # the report compares verdicts and speedups; profiles would only cost time
        timeout_s=params.timeout_s,
        compile_workers=params.compile_workers,
        eval_workers=params.eval_workers,
        baseline_cache_dir=out / "baselines",
    )
    settings = ExecutorSettings(backend, compile_workers=params.compile_workers)
    executor = make_executor("local", options, settings, make_verifier=make_verifier)
    records: list[Any] = []
    out.mkdir(parents=True, exist_ok=True)
    path = out / PROGRESS_JSONL
    torn = path.exists() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
    journal = path.open("a")
    if torn:
        journal.write("\n")  # end the last line of a run killed mid-write
    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    progress = Progress(*columns, console=console, disable=not (params.progress and console.is_terminal))
    try:
        with progress:
            bar = progress.add_task("re-verifying", total=len(pairs))
            hidden = known_secrets()  # its report and records are published like an archive (redaction.py)
            # A broken machine re-verifies nothing: the control kernel leads the stream, and every record waits
            # for its verdict (pipeline/control_gate.py); without one to lead, it runs before the first candidate.
            gate = ControlGate(executor.control())
            if gate.open:
                executor.preflight()
            control, rest = gate.lead(pairs)
            streaming = [control, *rest] if control else list(rest)
            while streaming:  # then the archive's own pair of the control kernel, if it has one (`take_deferred`)
                for outcome in executor.stream(iter(streaming)):
                    for record in gate.release(outcome):
                        if isinstance(record, InfrastructureFailure):  # not journaled: the next run retries it
                            raise InfrastructureError(f"re-verification stopped, {record.kernel_name} on task "
                                                      f"{record.task_id} was not verified: {record.reason}")  # fmt: skip
                        record = redact_record(record, hidden)
                        records.append(record)
                        journal.write(json.dumps(record_to_dict(record), default=str) + "\n")
                        journal.flush()  # kept if the run is cut off: the next run resumes after it
                        correct = sum(1 for r in records if r.status == "correct")
                        progress.update(bar, advance=1, description=f"re-verifying ({correct} correct)")
                gate.stream_ended()
                streaming = gate.take_deferred()
    finally:
        executor.close()
        journal.close()
    return records


def load_progress(out: Path) -> list[Any]:
    """Records a previous run of this --out left (a torn last line, from a run killed mid-write, is skipped)."""
    from schemas import record_from_dict

    path = out / PROGRESS_JSONL
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(record_from_dict(json.loads(line)))
        except (ValueError, TypeError):
            continue
    return records


def _write(out: Path, report: dict[str, Any], records: list[Any]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from schemas import record_to_dict
    from schemas.arrow import kernel_record_schema

    out.mkdir(parents=True, exist_ok=True)
    (out / REPORT_JSON).write_text(json.dumps(report, indent=1) + "\n")
    (out / REPORT_MD).write_text(render_markdown(report))
    table = pa.Table.from_pylist([record_to_dict(r) for r in records], schema=kernel_record_schema())
    pq.write_table(table, out / RECORDS_PARQUET, compression=config.PARQUET_COMPRESSION)
