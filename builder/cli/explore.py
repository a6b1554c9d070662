"""`kernel-archive explore [SOURCE]`: check the source, then serve the Streamlit explorer on it."""

from __future__ import annotations

import gc
import os
from typing import Optional

import typer

from builder import config
from builder.errors import ArchiveError

APP_PATH = config.REPO_ROOT / "explorer" / "app.py"


def streamlit_args(port: int, address: str) -> list[str]:
    """`streamlit run` arguments for the app (run in this process: see explore)."""
    return [
        "run",
        str(APP_PATH),
        "--server.headless",
        "true",
        "--server.port",
        str(port),
        "--server.address",
        address,
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
        # Readers get the app alone: no "Deploy" button, no developer options in the menu.
        "--client.toolbarMode",
        config.EXPLORER_TOOLBAR_MODE,
    ]


def explore(
    source: Optional[str] = typer.Argument(
        None,
        help="Dataset folder from `export`, a Parquet file/folder (ours or the 18-column public schema), "
        "or a Hub dataset id. Default: data/sample/ (a synthetic archive until that exists).",
    ),
    port: int = typer.Option(config.EXPLORER_DEFAULT_PORT, "--port", help="Port to serve on."),
    address: str = typer.Option(config.EXPLORER_DEFAULT_ADDRESS, "--address", help="Address to bind."),
    check_only: bool = typer.Option(False, "--check", help="Only open and check the source, then exit."),
) -> None:
    """Serve the explorer (leaderboards, kernel pages, map, search) on an archive."""
    from explorer import preload  # the query layer (pandas, DuckDB: ~1 s of imports) is imported only as needed
    from explorer.sources import resolve_source

    resolved = resolve_source(source)  # UsageError -> one line + exit 2 (builder.cli.main)
    kind = "synthetic archive" if resolved.synthetic else f"{resolved.kind} source"
    records = resolved.count_records()  # from the Parquet footers: an empty source is refused before serving
    typer.echo(f"{resolved.label}: {records:,} kernels ({kind}, {len(resolved.files)} Parquet file(s))", err=True)
    if check_only:
        from explorer.query import Archive

        Archive(resolved)  # open it in full: every record readable, or a one-line error
        return
    spec = resolved.spec if not os.path.exists(resolved.spec) else os.path.abspath(resolved.spec)
    os.environ[config.EXPLORER_SOURCE_ENV] = spec
    # The server runs in this process: the app's first page takes this archive (opened once the server serves,
    # while the browser loads the app) instead of opening it again.
    gc.disable()  # for the imports until the archive is open: explorer.preload says why and enables it again
    preload.open_in_background(spec, resolved, serving_at=(address, port))
    typer.echo(f"explorer: http://{address}:{port}/", err=True)
    from streamlit.web import cli as streamlit_cli

    try:  # exactly `streamlit run`; it returns when the server stops (Ctrl-C)
        streamlit_cli.main(args=streamlit_args(port, address), prog_name="streamlit", standalone_mode=False)
    except OSError as exc:
        raise ArchiveError(f"cannot start streamlit: {exc}") from None


def register(app: typer.Typer) -> None:
    app.command("explore")(explore)
