"""`kernel-archive` command line: a thin front-end over the builder library.

Each command lives in its own module and registers itself on `app`. Expected failures raise
`ArchiveError` subclasses and become one line on stderr with the error's exit code (2 for usage);
unexpected ones are reported in one line too (traceback only with KA_DEBUG=1).
"""

from __future__ import annotations

import importlib
import os
import sys

import typer

from builder.errors import ArchiveError, ExitCode

app = typer.Typer(
    name="kernel-archive",
    help="Build, verify, profile, export and explore verified GPU kernel archives.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Build, verify, profile, export and explore verified GPU kernel archives."""


# One module per command group; each defines register(app).
COMMAND_MODULES = (
    "tasks",
    "verify",
    "profile",
    "build",
    "status",
    "tidy",
    "export",
    "reverify",
    "publish",
    "embed",
    "explore",
)

for _name in COMMAND_MODULES:
    try:
        _module = importlib.import_module(f"builder.cli.{_name}")
    except ModuleNotFoundError as exc:  # a command whose module is not written yet
        if exc.name != f"builder.cli.{_name}":
            raise
        continue
    _module.register(app)


def fail(message: str, code: int = ExitCode.USAGE) -> None:
    """Print a one-line error and exit (for use inside commands)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(int(code))


def main() -> None:
    # Typer's standalone mode prints usage errors itself (exit 2); our own errors arrive here.
    try:
        app()
    except ArchiveError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(int(exc.exit_code))
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
        if os.environ.get("KA_DEBUG"):
            raise
        typer.echo(f"error: internal error: {type(exc).__name__}: {exc} (set KA_DEBUG=1 for a traceback)", err=True)
        sys.exit(int(ExitCode.INTERNAL))
