"""`kernel-archive export BUILD_DIR --out DATASET_DIR`: Parquet splits + configs + dataset card."""

from __future__ import annotations

from pathlib import Path

import typer

from builder import config


def export(
    build_dir: Path = typer.Argument(..., help="A build directory made by `kernel-archive build`."),
    out: Path = typer.Option(
        ..., "--out", help="Dataset directory (Hugging Face layout); re-export keeps embed columns."
    ),
    license_id: str = typer.Option(config.DEFAULT_LICENSE, "--license", help="License identifier for the card."),
    merge: bool = typer.Option(
        False, "--merge", help="Keep the dataset's records this build lacks (the build's record wins for a key)."
    ),
) -> None:
    """Export the build's records as a Hugging Face dataset directory."""
    from builder.pipeline.export import export_dataset

    result = export_dataset(build_dir, out, license_id=license_id, merge=merge)
    summary = "; ".join(
        f"{name}: " + ", ".join(f"{split}={info['rows']}" for split, info in splits.items())
        for name, splits in result.configs.items()
    )
    typer.echo(f"{out}: {result.record_count} record(s) exported ({summary})")
    if result.records_kept:
        typer.echo(f"{out}: kept {result.records_kept} record(s) of the previous export that this build lacks")
    if result.enrichment_carried:
        typer.echo(
            f"{out}: kept embedding/map columns of {result.enrichment_carried} record(s) from the previous export"
        )


def register(app: typer.Typer) -> None:
    app.command("export")(export)
