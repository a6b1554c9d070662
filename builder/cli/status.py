"""`kernel-archive status BUILD_DIR`: counts by level/status/flag, throughput and what remains."""

from __future__ import annotations

from pathlib import Path

import typer

from schemas import STATUSES


def status(build_dir: Path = typer.Argument(..., help="A build directory made by `kernel-archive build`.")) -> None:
    """Show what a build directory holds."""
    from rich.console import Console
    from rich.table import Table

    from builder.pipeline.status import read_status, run_duration_s

    report = read_status(build_dir)
    console = Console()
    if report.live is not None:
        live = report.live
        typer.echo(
            f"{build_dir}: build running (pid {live.get('pid')}): {live.get('stored', 0)} stored this run, "
            f"{live.get('in_flight', 0)} in flight, {live.get('remaining', 0)} remaining, "
            f"{live.get('kernels_per_hour', 0):.0f} kernels/h; by status {live.get('by_status', {})}"
            + (f"; {live['waiting']} waiting after a failure of the builder's machinery" if live.get("waiting") else "")
        )
        return
    table = Table(title=f"{build_dir}: {report.total} record(s)")
    table.add_column("level", justify="right")
    for name in STATUSES:
        table.add_column(name, justify="right")
    table.add_column("total", justify="right")
    for level in sorted({lvl for lvl, _ in report.by_level_status}):
        row = [report.by_level_status.get((level, s), 0) for s in STATUSES]
        table.add_row(str(level), *map(str, row), str(sum(row)))
    console.print(table)
    if report.by_flag:
        console.print("flags: " + ", ".join(f"{f}={n}" for f, n in sorted(report.by_flag.items())))
    else:
        console.print("flags: none raised")
    for run in report.builds:
        counts = run.get("counts") or {}
        took = run_duration_s(run)
        console.print(
            f"run {run['build_id']}: {run['state']}, started {run['started_at']}"
            + (f", {took:.0f}s" if took is not None else "")
            + f", {counts.get('stored', 0)} stored, {counts.get('resumed', 0)} resumed"
        )
    if report.waiting:
        latest = report.waiting[0]
        console.print(f"waiting after a failure of the builder's machinery (no record; a rerun retries them): "
                      f"{len(report.waiting)} pair(s); latest, {latest['failures']} failure(s) of "
                      f"{latest['task_id']} {latest['kernel_id']}: {latest['reason']}", markup=False)  # fmt: skip
    rate = report.throughput_per_hour()
    console.print(f"throughput: {rate:.0f} kernels/h" if rate is not None else "throughput: no finished run yet")
    if report.builds and report.builds[-1]["state"] in ("running", "interrupted", "failed"):
        console.print("remaining: the last run did not finish; rerun the same build command to resume it")
    if report.tasks_without_records:
        missing = report.tasks_without_records
        shown = ", ".join(missing[:10]) + (f", ... ({len(missing) - 10} more)" if len(missing) > 10 else "")
        console.print(f"tasks without records ({len(missing)}): {shown}")
    elif report.builds and report.builds[-1]["state"] == "finished":
        console.print("remaining: nothing (the last run finished)")


def register(app: typer.Typer) -> None:
    app.command("status")(status)
