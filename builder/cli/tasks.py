"""`kernel-archive tasks`: list the tasks of the built-in suite or an external one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from builder.errors import UsageError
from builder.tasks import load_suite


def tasks(
    suite: Optional[Path] = typer.Option(
        None, "--suite", help="External KernelBench-style checkout (folders level1/, level2/, ...)."
    ),
    level: Optional[int] = typer.Option(None, "--level", help="Only tasks of this level."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list of task objects."),
) -> None:
    """List tasks: id LEVEL/NUMBER, name, category."""
    loaded = load_suite(suite)
    chosen = loaded.select(levels=[level] if level is not None else None)
    if not chosen and level is not None:
        have = sorted({t.level for t in loaded.tasks})
        raise UsageError(f"no tasks at level {level} in {loaded.root} (levels there: {', '.join(map(str, have))})")
    if as_json:
        typer.echo(json.dumps([t.summary() for t in chosen], indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("id", "name", "category", "dtype", "functional", box=None)
    for t in chosen:
        table.add_row(t.id, t.name, t.op_category, t.dtype, "yes" if t.has_functional else "no")
    Console().print(table)


def register(app: typer.Typer) -> None:
    app.command("tasks")(tasks)
