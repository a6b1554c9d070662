"""`kernel-archive embed`: fill the embedding columns of an exported dataset, incrementally.

- Rows whose `embedding` was made by the same model keep it; the others are embedded.
- Map and clusters are recomputed together when any row was (re-)embedded or lacks map
  coordinates, or with refit=True; otherwise they are kept as they are (stable cluster ids).
- strategy_tags, cluster labels and dup_group are recomputed on every run: all are cheap and deterministic.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from builder import config
from builder.embed.code_text import device_code, normalised_hash
from builder.embed.dataset_io import EMBED_COLUMNS, read_dataset, with_columns, write_tables_atomically
from builder.embed.dups import duplicate_groups
from builder.embed.embed import CodeEmbedder
from builder.embed.label_terms import kernel_terms
from builder.embed.labels import cluster_labels
from builder.embed.mapping import compute_layout
from builder.embed.tags import strategy_tags

EmbedderFactory = Callable[[], CodeEmbedder]


@dataclass
class EmbedSummary:
    rows: int = 0
    embedded: int = 0  # rows embedded by this run
    chunks: int = 0  # distinct chunks the model encoded
    refitted: bool = False
    layout_method: str = "kept"
    clusters: int = 0
    noise: int = 0
    dup_groups: int = 0
    model_id: str = ""
    files: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def default_embedder_factory(model_name: str | None, batch_size: int) -> EmbedderFactory:
    def make() -> CodeEmbedder:
        from builder.embed.model import load_model

        model, model_id = load_model(model_name)
        return CodeEmbedder(model, model_id, batch_size=batch_size)

    return make


def embed_dataset(
    dataset_dir: Path,
    model_name: str | None = None,
    batch_size: int = config.EMBED_BATCH_SIZE,
    refit: bool = False,
    embedder_factory: EmbedderFactory | None = None,
) -> EmbedSummary:
    from builder.embed.model import resolve_model

    model_id = resolve_model(model_name).model_id
    factory = embedder_factory or default_embedder_factory(model_name, batch_size)
    summary = EmbedSummary(model_id=model_id)
    clock = time.perf_counter()
    files = read_dataset(Path(dataset_dir))
    wanted = ("kernel_id", "task_id", "op_name", "op_category", "language", "cuda_code", *EMBED_COLUMNS)
    rows: dict[str, list] = {name: [] for name in wanted}
    for table in files.splits.values():
        for name in wanted:
            rows[name].extend(table.column(name).to_pylist())
    n_rows = summary.rows = len(rows["kernel_id"])
    summary.seconds["read"] = time.perf_counter() - clock

    clock = time.perf_counter()
    texts = [device_code(src or "", lang) for src, lang in zip(rows["cuda_code"], rows["language"], strict=True)]
    stale = [i for i in range(n_rows) if rows["embedding"][i] is None or rows["embedding_model"][i] != model_id]
    if stale:
        embedder = factory()
        if embedder.model_id != model_id:
            raise AssertionError(f"embedder made for {embedder.model_id!r}, expected {model_id!r}")
        vectors = embedder.embed([texts[i] for i in stale])
        for i, vector in zip(stale, vectors, strict=True):
            rows["embedding"][i] = vector.tolist()
            rows["embedding_model"][i] = model_id
        summary.embedded, summary.chunks = len(stale), embedder.chunks_embedded
    summary.seconds["embed"] = time.perf_counter() - clock
    embeddings = np.asarray(rows["embedding"], dtype=np.float32) if n_rows else np.zeros((0, 0), np.float32)

    clock = time.perf_counter()
    # Tags first: cluster labels are written in their vocabulary.
    rows["strategy_tags"] = [
        strategy_tags(src or "", lang) for src, lang in zip(rows["cuda_code"], rows["language"], strict=True)
    ]
    summary.seconds["tags"] = time.perf_counter() - clock

    clock = time.perf_counter()
    lacks_layout = any(rows["map_x"][i] is None or rows["cluster_id"][i] is None for i in range(n_rows))
    if refit or stale or lacks_layout:
        layout = compute_layout(embeddings, config.RANDOM_STATE)
        rows["map_x"] = layout.map_xy[:, 0].tolist()
        rows["map_y"] = layout.map_xy[:, 1].tolist()
        rows["cluster_id"] = layout.cluster_ids.tolist()
        summary.refitted, summary.layout_method = True, layout.method
    summary.seconds["map"] = time.perf_counter() - clock

    clock = time.perf_counter()
    # Labels follow the kept or new clusters on every run (cheap): they pick up tag and vocabulary changes.
    terms = [
        kernel_terms(category, op, tags, text)
        for category, op, tags, text in zip(
            rows["op_category"], rows["op_name"], rows["strategy_tags"], texts, strict=True
        )
    ]
    labels = cluster_labels(terms, rows["cluster_id"], rows["kernel_id"])
    rows["cluster_label"] = [labels[c] for c in rows["cluster_id"]]
    summary.seconds["labels"] = time.perf_counter() - clock

    clock = time.perf_counter()
    hashes = [normalised_hash(src or "", lang) for src, lang in zip(rows["cuda_code"], rows["language"], strict=True)]
    rows["dup_group"] = duplicate_groups(rows["kernel_id"], rows["task_id"], hashes, embeddings)
    summary.seconds["dups"] = time.perf_counter() - clock

    clusters = {c for c in rows["cluster_id"] if c is not None and c >= 0}
    summary.clusters, summary.noise = len(clusters), sum(1 for c in rows["cluster_id"] if c == -1)
    summary.dup_groups = len({g for g in rows["dup_group"] if g is not None})

    clock = time.perf_counter()
    new_tables, start = {}, 0
    for path, table in files.splits.items():
        stop = start + table.num_rows
        new_tables[path] = with_columns(table, {name: rows[name][start:stop] for name in EMBED_COLUMNS})
        start = stop
    position = {kernel_id: i for i, kernel_id in enumerate(rows["kernel_id"])}
    for path, table in files.extras.items():
        # Rows of an extra config that name no kernel of the splits keep their values.
        index = [position.get(kernel_id) for kernel_id in table.column("kernel_id").to_pylist()]
        updates = {}
        for name in EMBED_COLUMNS:
            if name in table.column_names:
                old = table.column(name).to_pylist()
                updates[name] = [rows[name][i] if i is not None else old[k] for k, i in enumerate(index)]
        new_tables[path] = with_columns(table, updates)
    write_tables_atomically(new_tables)
    summary.files = [str(p) for p in new_tables]
    summary.seconds["write"] = time.perf_counter() - clock
    return summary
