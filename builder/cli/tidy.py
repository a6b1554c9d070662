"""`kernel-archive tidy BUILD_DIR`: run clang-tidy over stored records that were built without it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer


def tidy(
    build_dir: Path = typer.Argument(..., help="A build directory made by `kernel-archive build`."),
    workers: int = typer.Option(
        max(1, os.cpu_count() or 1), "--workers", help="clang-tidy processes at a time (each ~25 CPU s per kernel)."
    ),
    redo: bool = typer.Option(False, "--redo", help="Analyse every record again, not only those never analysed."),
    reuse: Optional[Path] = typer.Option(
        None,
        "--reuse",
        help="An exported dataset whose identical analyses (same source, architecture, clang-tidy version and "
        "checks) are taken rather than repeated.",
    ),
) -> None:
    """Fill in clang-tidy for records built where it was not installed (e.g. on a GPU box).

    clang-tidy only parses the stored source, so this runs on any machine; each record is committed
    as it finishes (a killed run resumes). Run `kernel-archive export` again afterwards."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from builder.pipeline import tidy_pass
    from builder.pipeline.store import Store

    with Store.open_existing(build_dir, read_only=True) as store:
        total = len(tidy_pass.pending_jobs(store, redo))
    if total == 0:
        typer.echo(f"{build_dir}: every CUDA/C++ record has clang-tidy results already (use --redo to redo them)")
        return
    columns = (TextColumn("clang-tidy"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=True) as progress:
        bar = progress.add_task("tidy", total=total)
        summary = tidy_pass.run(
            build_dir, workers=workers, redo=redo, on_done=lambda *_: progress.advance(bar), reuse_from=reuse
        )
    reused = f" ({summary.reused} taken from {reuse})" if reuse is not None else ""
    typer.echo(
        f"{build_dir}: clang-tidy on {summary.updated} record(s){reused}: {summary.warnings} warning(s) in all, "
        f"{summary.failed} not analysable; run `kernel-archive export {build_dir} --out DATASET_DIR` to publish them"
    )
    for line in summary.errors[:10]:
        typer.echo(f"  {line}", err=True)


def register(app: typer.Typer) -> None:
    app.command("tidy")(tidy)
