"""Embeddings, the 2-D map, clusters and their labels, strategy tags and duplicate groups.

Entry point: `builder.embed.annotate.embed_dataset(dataset_dir, ...)` (the `kernel-archive embed` command).
"""
