"""`kernel-archive reverify DATASET`: re-verify an archive on this machine and report whether it held."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from builder import config


def reverify(
    dataset: str = typer.Argument(
        ..., help="Export folder of ours (either config), 18-column archive, importable folder or Hub dataset id."
    ),
    tasks: Optional[str] = typer.Option(None, "--tasks", help="Regular expression on task id or name."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Re-verify at most N kernels (archive order)."),
    out: Optional[Path] = typer.Option(
        None, "--out", help=f"Report folder (default: next to the dataset, DATASET{config.REVERIFY_OUT_SUFFIX})."
    ),
    backend: Optional[str] = typer.Option(None, "--backend", help="cuda | cpu (default: cuda when a GPU is visible)."),
    trials: int = typer.Option(config.DEFAULT_TRIALS, "--trials", min=1, help="Correctness trials (fresh seeds)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=1, help="Seconds per kernel evaluation."),
    compile_workers: Optional[int] = typer.Option(
        None,
        "--compile-workers",
        min=1,
        help="Parallel compiles (default: of the cores this process may run on, half with one GPU, three quarters with several).",
    ),
    eval_workers: Optional[int] = typer.Option(
        None,
        "--eval-workers",
        min=1,
        help="Evaluation workers per GPU (default: 12 on one GPU of 64 GiB or more with 16 or more cores, else 8).",
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
    restart: bool = typer.Option(
        False, "--restart", help="Verify everything again (by default a rerun resumes after the kernels in --out)."
    ),
    report_only: bool = typer.Option(
        False, "--report-only", help="Verify nothing: write the report from the records a cut-off run left in --out."
    ),
) -> None:
    """Re-verify an archive's kernels here: verdict agreement, flag changes, speedup ratios, what moved.

    Writes report.md, report.json and records.parquet (the new records) to --out. Each record is also appended to
    records.jsonl as it arrives, so a run that is cut off keeps its work and a rerun resumes after it. Exits 0
    when it ran; the report's first line says whether the archive held."""
    from builder.pipeline.reverify_run import REPORT_MD, ReverifyParams, run_reverify
    from builder.verify.sandbox.bubblewrap import weak_isolation_warning

    params = ReverifyParams(
        dataset=dataset,
        out=out,
        backend=backend,
        tasks=tasks,
        limit=limit,
        trials=trials,
        timeout_s=timeout,
        compile_workers=compile_workers,
        eval_workers=eval_workers,
        progress=not quiet,
        restart=restart,
        report_only=report_only,
    )
    if not report_only and (warning := weak_isolation_warning()):
        typer.echo(warning, err=True)
    report, folder = run_reverify(params)
    typer.echo(f"{dataset}: {report['kernels']} kernel(s) re-verified on {report['backend']}; {report['verdict']}")
    typer.echo(f"report: {folder / REPORT_MD}")


def register(app: typer.Typer) -> None:
    app.command("reverify")(reverify)
