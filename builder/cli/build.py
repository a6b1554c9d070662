"""`kernel-archive build`: generate, verify, profile and store kernels for a set of tasks (resumable)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from builder import config

NOTES_SHOWN = 5  # generator notes printed after a build (the rest are counted)


def build(
    out: Path = typer.Option(..., "--out", help="Build directory (created; rerun the same command to resume)."),
    generator: str = typer.Option(
        "auto", "--generator", help="auto | bundled | llm | import (auto: llm when OPENAI_BASE_URL or KA_MODEL is set)."
    ),
    suite: Optional[Path] = typer.Option(
        None, "--suite", help="External KernelBench-style task suite (default: built-in)."
    ),
    levels: Optional[str] = typer.Option(None, "--levels", help="Comma-separated levels, e.g. 1,2,3 (default: all)."),
    tasks: Optional[str] = typer.Option(None, "--tasks", help="Regular expression on task id or name."),
    backend: str = typer.Option("cuda", "--backend", help="cuda | cpu"),
    gpus: Optional[int] = typer.Option(
        None, "--gpus", min=1, help="GPUs to use (default: all visible; with --executor ray, at most this many a node)."
    ),
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
    executor: str = typer.Option("local", "--executor", help="local | ray"),
    ray_address: Optional[str] = typer.Option(
        None, "--ray-address", help="Existing Ray cluster (default: start a local one)."
    ),
    trials: int = typer.Option(
        config.DEFAULT_TRIALS, "--trials", min=1, help="Correctness trials (fresh seeds per build run)."
    ),
    profile: Optional[bool] = typer.Option(
        None, "--profile/--no-profile", help="Run profilers (default: on for cuda)."
    ),
    source: Optional[str] = typer.Option(
        None, "--source", help="--generator import: folder, Sakana Parquet dir or Hub dataset id."
    ),
    llm_config: Optional[Path] = typer.Option(None, "--llm-config", help="--generator llm: TOML settings file."),
    model: Optional[list[str]] = typer.Option(None, "--model", help="--generator llm: model name (repeatable)."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="--generator llm: OpenAI-compatible endpoint."),
    experiment: Optional[str] = typer.Option(None, "--experiment", help="--generator llm: experiment name."),
    quiet: bool = typer.Option(False, "--quiet", help="No live progress view or summary."),
) -> None:
    """Build (or resume) an archive: every finished kernel is committed to BUILD_DIR/archive.duckdb."""
    from builder.pipeline.build import BuildParams, parse_levels, run_build
    from builder.verify.sandbox.bubblewrap import weak_isolation_warning

    llm_options = {"config_path": llm_config, "models": model or None, "base_url": base_url, "experiment": experiment}
    params = BuildParams(
        out=out,
        generator=generator,
        suite=suite,
        levels=parse_levels(levels),
        tasks=tasks,
        backend=backend,
        gpus=gpus,
        compile_workers=compile_workers,
        eval_workers=eval_workers,
        executor=executor,
        ray_address=ray_address,
        trials=trials,
        profile=profile,
        source=source,
        llm_options={k: v for k, v in llm_options.items() if v is not None},
    )
    if warning := weak_isolation_warning():
        typer.echo(warning, err=True)
    orchestrator = run_build(params, show_progress=not quiet)
    notes = list(dict.fromkeys(orchestrator.notes))
    for note in notes[:NOTES_SHOWN]:
        typer.echo(f"note: {note}", err=True)
    if len(notes) > NOTES_SHOWN:
        typer.echo(f"note: ... and {len(notes) - NOTES_SHOWN} more like these", err=True)
    c = orchestrator.counters
    typer.echo(f"{out}: {c.stored} new record(s), {c.resumed} already stored, {c.by_status.get('correct', 0)} correct")


def register(app: typer.Typer) -> None:
    app.command("build")(build)
