"""`kernel-archive verify CANDIDATE --task TASK`: compile and verify one candidate, print its record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from builder.cli.candidate_args import resolve_candidate
from builder.errors import UsageError


def _summary(record) -> None:
    from rich.console import Console

    console = Console()
    colour = "green" if record.status == "correct" else "red"
    console.print(f"[bold]{record.kernel_name}[/bold] on task {record.task_id} ({record.op_name}, {record.backend})")
    console.print(f"status: [{colour}]{record.status}[/{colour}]   flags: {', '.join(record.flags) or '-'}")
    if record.max_diff is not None:
        console.print(f"max_diff: {record.max_diff:.3g} (atol {record.atol:g}, rtol {record.rtol:g})")
    if record.runtime_ms is not None:
        line = f"runtime: {record.runtime_ms:.4g} ms"
        if record.speedup_eager is not None:
            line += f"   eager {record.eager_ms:.4g} ms ({record.speedup_eager:.2f}x)"
        if record.speedup_compile is not None:
            line += f"   torch.compile {record.compile_ms:.4g} ms ({record.speedup_compile:.2f}x)"
        console.print(line)
    if record.error:
        console.print("error:", record.error.strip().splitlines()[0][:300], markup=False)
    console.print(f"kernel_id: {record.kernel_id}   isolation: {record.isolation}", markup=False)


def verify(
    candidate: Path = typer.Argument(..., help="Candidate file: .cu (CUDA), .cpp (CPU extension) or .py (ModelNew)."),
    task: str = typer.Option(..., "--task", help="Suite id like 1/3, or a task file path."),
    backend: Optional[str] = typer.Option(None, "--backend", help="cuda or cpu (default: cuda when a GPU is visible)."),
    suite: Optional[Path] = typer.Option(None, "--suite", help="External KernelBench-style suite for a TASK id."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Evaluation timeout in seconds."),
    compile_timeout: Optional[float] = typer.Option(None, "--compile-timeout", help="Compile timeout in seconds."),
    atol: Optional[float] = typer.Option(None, "--atol", help="Absolute tolerance (default: per dtype/task)."),
    rtol: Optional[float] = typer.Option(None, "--rtol", help="Relative tolerance (default: per dtype/task)."),
    trials: Optional[int] = typer.Option(None, "--trials", help="Correctness trials (fresh secret seeds each)."),
    profile: bool = typer.Option(False, "--profile/--no-profile", help="Also run clang-tidy and Nsight Compute."),
    as_json: bool = typer.Option(False, "--json", help="Print the record as one JSON object."),
) -> None:
    """Compile and verify one candidate against its task; exit 0 whenever a record was produced (75 where the
    builder's own machinery failed: no verdict)."""
    from builder import config
    from builder.redaction import known_secrets, redact_record
    from builder.verify.engine.preflight import preflight
    from builder.verify.engine.verifier import verify as run_verify
    from builder.verify.options import VerifyOptions
    from builder.verify.sandbox.bubblewrap import weak_isolation_warning
    from schemas import record_to_dict

    for name, value in (("--timeout", timeout), ("--compile-timeout", compile_timeout), ("--trials", trials)):
        if value is not None and value <= 0:
            raise UsageError(f"{name} must be positive")
    for name, value in (("--atol", atol), ("--rtol", rtol)):
        if value is not None and value < 0:
            raise UsageError(f"{name} must not be negative")
    cand, chosen_task, backend = resolve_candidate(candidate, task, suite, backend)
    options = VerifyOptions(
        backend=backend,
        timeout_s=timeout if timeout is not None else config.RUN_TIMEOUT_S,
        compile_timeout_s=compile_timeout if compile_timeout is not None else config.COMPILE_TIMEOUT_S,
        atol=atol,
        rtol=rtol,
        trials=trials if trials is not None else config.DEFAULT_TRIALS,
        profile=profile,
    )
    if warning := weak_isolation_warning():
        typer.echo(warning, err=True)
    preflight(options)  # the control kernel first: a broken sandbox or toolchain is one line, not a verdict
    record = run_verify(cand, chosen_task, options)
    # Printed records end up in issues and files: redacted of the builder's secrets as an archive's are.
    record = redact_record(record, known_secrets())
    if as_json:
        typer.echo(json.dumps(record_to_dict(record)))
    else:
        _summary(record)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify)
