"""`kernel-archive embed`: embeddings, map, clusters, labels, strategy tags and duplicates for a dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from builder import config
from builder.errors import UsageError


def embed(
    dataset_dir: Path = typer.Argument(..., help="Dataset folder written by `kernel-archive export`."),
    model: Optional[str] = typer.Option(
        None,
        "--model",
        help=(
            f"sentence-transformers model: name in the local cache or folder (default {config.DEFAULT_EMBEDDING_MODEL}); "
            f"{config.STATIC_EMBEDDING_MODEL}: a static model distilled from it offline, ~100x faster on a CPU."
        ),
    ),
    batch_size: int = typer.Option(config.EMBED_BATCH_SIZE, "--batch-size", help="Chunks per forward pass."),
    refit: bool = typer.Option(False, "--refit", help="Recompute map, clusters and labels even if no row is new."),
) -> None:
    """Fill embedding, map_x/map_y, cluster_id/cluster_label, strategy_tags and dup_group in place."""
    if batch_size < 1:
        raise UsageError("--batch-size must be at least 1")
    from builder.embed.annotate import embed_dataset

    summary = embed_dataset(dataset_dir, model_name=model, batch_size=batch_size, refit=refit)
    layout = f"map {summary.layout_method}" if summary.refitted else "map kept (no new rows; --refit recomputes it)"
    typer.echo(
        f"{summary.rows} rows: {summary.embedded} embedded ({summary.chunks} chunks, {summary.model_id}); "
        f"{layout}; {summary.clusters} clusters, {summary.noise} unclustered; {summary.dup_groups} duplicate groups"
    )
    timings = ", ".join(f"{stage} {seconds:.1f}s" for stage, seconds in summary.seconds.items())
    typer.echo(f"rewrote {len(summary.files)} file(s) in {dataset_dir} ({timings})")


def register(app: typer.Typer) -> None:
    app.command("embed")(embed)
