"""`kernel-archive publish DATASET_DIR --repo-id ORG/NAME`: upload an exported dataset to the Hub."""

from __future__ import annotations

from pathlib import Path

import typer


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def publish(
    dataset_dir: Path = typer.Argument(..., help="A dataset directory made by `kernel-archive export`."),
    repo_id: str = typer.Option(..., "--repo-id", help="Hub dataset repository, ORG/NAME."),
    private: bool = typer.Option(False, "--private", help="Create the repository private."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="List the files and sizes that would be uploaded (no token needed)."
    ),
) -> None:
    """Create the dataset repository (if needed) and upload the export."""
    from builder.pipeline.publish import publish_dataset

    result = publish_dataset(dataset_dir, repo_id, private=private, dry_run=dry_run)
    if dry_run:
        for path, size in result.files:
            typer.echo(f"{_size(size):>10}  {path}")
        typer.echo(f"dry run: {len(result.files)} file(s), {_size(result.total_bytes)} would go to {repo_id} (dataset)")
        return
    typer.echo(f"published {len(result.files)} file(s), {_size(result.total_bytes)} to {result.url} ({result.method})")


def register(app: typer.Typer) -> None:
    app.command("publish")(publish)
