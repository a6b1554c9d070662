"""Benchmark of `kernel-archive embed` on synthetic kernels (CPU by default), static model vs MiniLM.

    .venv/bin/python benchmarks/bench_embed.py [--n 30000] [--minilm-sample 200] [--device cpu] [--no-quality]

1. The whole pipeline for --n synthetic kernels with the static model (`minilm-static`), end to end and
   for real: strip, embed every kernel, UMAP map + HDBSCAN clusters, c-TF-IDF labels, strategy tags,
   duplicate groups. The one-off distillation (cached afterwards) is timed separately. The synthetic
   corpus repeats device code a lot (repeats are encoded once), so the embedding is measured again
   with every kernel made distinct, as in a real archive.
2. MiniLM (the default model): --minilm-sample distinct kernels embedded and timed, the rate
   extrapolated to --n distinct kernels and to this corpus's distinct chunks (printed as
   extrapolations, not measurements); 0 skips it.
3. Quality on the bundled corpus (data/candidates/cuda): each kernel's 5 nearest neighbours under both
   models (overlap) and how many of its same-task siblings each model retrieves among them.

Prints wall and process-CPU seconds per stage, the machine and the load average (the box may be shared).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from builder import config  # noqa: E402
from builder.embed.code_text import device_code, normalised_hash  # noqa: E402
from builder.embed.dups import duplicate_groups  # noqa: E402
from builder.embed.embed import CodeEmbedder  # noqa: E402
from builder.embed.label_terms import kernel_terms  # noqa: E402
from builder.embed.labels import cluster_labels  # noqa: E402
from builder.embed.mapping import compute_layout  # noqa: E402
from builder.embed.model import load_model  # noqa: E402
from builder.embed.static_model import ensure_distilled  # noqa: E402
from builder.embed.synthetic import synthetic_kernels  # noqa: E402
from builder.embed.tags import strategy_tags  # noqa: E402

NEIGHBOURS = 5
TARGET_S = 600.0


class Stages:
    """Wall and process-CPU seconds per named stage (CPU: on a shared box wall time overstates)."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def run(self, name: str, work: Callable[[], Any]) -> Any:
        clock, cpu_clock = time.perf_counter(), time.process_time()
        result = work()
        self.wall[name], self.cpu[name] = time.perf_counter() - clock, time.process_time() - cpu_clock
        return result

    def table(self, title: str) -> None:
        print(f"\n{title}\n{'stage':>14}  {'wall s':>8}  {'CPU s':>8}")
        for name, seconds in self.wall.items():
            print(f"{name:>14}: {seconds:8.1f}  {self.cpu[name]:8.1f}")
        total = sum(self.wall.values())
        print(f"{'total':>14}: {total:8.1f}  {sum(self.cpu.values()):8.1f}")


def made_distinct(texts: list[str]) -> list[str]:
    """The texts with one distinct declaration appended each, so no two are equal and none is skipped as
    a repeat (the synthetic corpus repeats device code a lot; a real archive mostly does not)."""
    return [f"{text}\nconstexpr int variant_{i} = {i};" for i, text in enumerate(texts)]


def static_pipeline(n: int, device: str, batch_size: int) -> tuple[Stages, list[str], dict[str, float]]:
    """The measured stages, the stripped texts, and the embed stage again on all-distinct texts."""
    stages = Stages()
    folder, distilled = stages.run("distill", lambda: ensure_distilled())
    one_off = dict(wall=stages.wall.pop("distill"), cpu=stages.cpu.pop("distill"))
    state = "distilled now (one-off, then cached)" if distilled else "cache reused, checked in"
    print(f"static model: {folder}: {state} {one_off['wall']:.1f} s wall, {one_off['cpu']:.1f} CPU s")
    kernels = stages.run("generate", lambda: synthetic_kernels(n, seed=config.RANDOM_STATE, tasks=240))
    texts = stages.run("strip", lambda: [device_code(k.source, "cuda") for k in kernels])
    model, model_id = stages.run("load model", lambda: load_model(config.STATIC_EMBEDDING_MODEL, device=device))
    embedder = CodeEmbedder(model, model_id, batch_size=batch_size)
    vectors = stages.run("embed", lambda: embedder.embed(texts))
    print(
        f"embed: {n} kernels, {len(set(k.source for k in kernels))} distinct sources, {len(set(texts))} distinct "
        f"once comments/boilerplate are stripped -> {embedder.chunks_embedded} chunks encoded, "
        f"{vectors.shape[1]}-D ({model_id})"
    )
    layout = stages.run("map+cluster", lambda: compute_layout(vectors, config.RANDOM_STATE))
    tags = stages.run("tags", lambda: [strategy_tags(k.source, "cuda") for k in kernels])

    def labels_of() -> dict[int, str]:
        # A synthetic kernel's name is "<category>_<op>_<index>": its op category and task op.
        terms = [
            kernel_terms(k.name.split("_")[0], k.name, kernel_tags, text)
            for k, kernel_tags, text in zip(kernels, tags, texts, strict=True)
        ]
        return cluster_labels(terms, layout.cluster_ids.tolist(), [f"k{i:06d}" for i in range(n)])

    labels = stages.run("labels", labels_of)

    def dups() -> list:
        hashes = [normalised_hash(k.source, "cuda") for k in kernels]
        return duplicate_groups([f"k{i:06d}" for i in range(n)], [k.task_id for k in kernels], hashes, vectors)

    groups = stages.run("dups", dups)
    agree = sum(set(t) == set(k.strategies) for t, k in zip(tags, kernels, strict=True)) / n
    print(
        f"rows={n} layout={layout.method} clusters={len(labels) - (1 if -1 in labels else 0)} "
        f"noise={(layout.cluster_ids == -1).sum()} dup_groups={len({g for g in groups if g})} "
        f"tags_match_template={agree:.3f}"
    )
    for cluster in sorted(labels)[:6]:
        print(f"  cluster {cluster}: {labels[cluster]}")

    distinct = made_distinct(texts)
    fresh = CodeEmbedder(model, model_id, batch_size=batch_size)
    clock, cpu_clock = time.perf_counter(), time.process_time()
    fresh.embed(distinct)
    unique = {"wall": time.perf_counter() - clock, "cpu": time.process_time() - cpu_clock}
    print(
        f"embed again, every kernel made distinct ({fresh.chunks_embedded} chunks encoded): "
        f"{unique['wall']:.1f} s wall, {unique['cpu']:.1f} CPU s (measured)"
    )
    return stages, texts, unique


def minilm_extrapolated(texts: list[str], sample: int, device: str, batch_size: int) -> dict[str, float]:
    """MiniLM embedding cost of all texts, extrapolated from `sample` distinct ones: CPU and wall seconds
    if every kernel were distinct, and for this corpus as it is (repeated chunks are encoded once)."""
    model, model_id = load_model(None, device=device)
    embedder = CodeEmbedder(model, model_id, batch_size=batch_size)
    distinct = list(dict.fromkeys(texts))
    step = max(1, len(distinct) // sample)  # spread over the templates, not the first few only
    picked = distinct[::step][:sample]
    clock, cpu_clock = time.perf_counter(), time.process_time()
    embedder.embed(picked)
    wall, cpu = time.perf_counter() - clock, time.process_time() - cpu_clock
    chunks = embedder.chunks_embedded
    print(
        f"\nMiniLM ({model_id}): {len(picked)} distinct kernels = {chunks} chunks embedded in {wall:.1f} s wall, "
        f"{cpu:.1f} CPU s ({cpu / max(1, chunks):.3f} CPU s per chunk, {chunks / len(picked):.2f} chunks per kernel)"
    )
    corpus_chunks = len({piece for text in distinct for piece in embedder.chunk(text)})  # tokenizer only
    per_kernel, per_chunk = len(texts) / len(picked), corpus_chunks / max(1, chunks)
    figures = {
        "wall_distinct": wall * per_kernel,
        "cpu_distinct": cpu * per_kernel,
        "wall_corpus": wall * per_chunk,
        "cpu_corpus": cpu * per_chunk,
    }
    print(
        f"MiniLM embed of {len(texts)} kernels, EXTRAPOLATED (not measured): every kernel distinct "
        f"{figures['wall_distinct']:.0f} s wall, {figures['cpu_distinct']:.0f} CPU s; this synthetic corpus "
        f"({corpus_chunks} distinct chunks) {figures['wall_corpus']:.0f} s wall, {figures['cpu_corpus']:.0f} CPU s"
    )
    return figures


def bundled_corpus() -> tuple[list[str], list[str]]:
    """(device code, task id "L/N") of every bundled CUDA candidate."""
    texts, tasks = [], []
    for path in sorted(config.CANDIDATES_DIR.glob("cuda/level*/*/*.cu")):
        level = path.parent.parent.name.removeprefix("level")
        texts.append(device_code(path.read_text(), "cuda"))
        tasks.append(f"{level}/{path.parent.name.split('_', 1)[0]}")
    return texts, tasks


def nearest(vectors: np.ndarray, k: int) -> np.ndarray:
    """Indices of each row's k most cosine-similar other rows (rows are unit length)."""
    similarity = vectors @ vectors.T
    np.fill_diagonal(similarity, -np.inf)
    return np.argsort(-similarity, axis=1, kind="stable")[:, :k]


def sibling_recall(neighbours: np.ndarray, tasks: list[str]) -> float:
    """Mean share of a kernel's same-task siblings (up to k of them) found among its k neighbours."""
    scores = []
    for row, found in enumerate(neighbours):
        siblings = {j for j, task in enumerate(tasks) if task == tasks[row] and j != row}
        if siblings:
            scores.append(len(siblings & set(found.tolist())) / min(len(siblings), len(found)))
    return float(np.mean(scores))


def quality(device: str, batch_size: int) -> None:
    texts, tasks = bundled_corpus()
    vectors = {}
    for name in (None, config.STATIC_EMBEDDING_MODEL):
        model, model_id = load_model(name, device=device)
        clock = time.process_time()
        vectors[model_id] = CodeEmbedder(model, model_id, batch_size=batch_size).embed(texts)
        print(
            f"quality: {len(texts)} bundled kernels embedded with {model_id} in {time.process_time() - clock:.1f} CPU s"
        )
    (minilm_id, minilm), (static_id, static) = vectors.items()
    near_minilm, near_static = nearest(minilm, NEIGHBOURS), nearest(static, NEIGHBOURS)
    overlap = np.mean([len(set(a) & set(b)) / NEIGHBOURS for a, b in zip(near_minilm, near_static, strict=True)])
    rng = np.random.default_rng(config.RANDOM_STATE)
    shuffled = np.array(
        [rng.choice(np.delete(np.arange(len(texts)), i), NEIGHBOURS, replace=False) for i in range(len(texts))]
    )
    print(
        f"quality on {len(texts)} bundled kernels of {len(set(tasks))} tasks, k={NEIGHBOURS}:\n"
        f"  neighbour overlap static vs MiniLM: {overlap:.3f} (random neighbours: {NEIGHBOURS / (len(texts) - 1):.3f})\n"
        f"  same-task sibling recall@{NEIGHBOURS}: MiniLM {sibling_recall(near_minilm, tasks):.3f}, "
        f"static {sibling_recall(near_static, tasks):.3f}, random {sibling_recall(shuffled, tasks):.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30000)
    parser.add_argument("--minilm-sample", type=int, default=200, help="kernels MiniLM embeds (0: skip MiniLM)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=config.EMBED_BATCH_SIZE)
    parser.add_argument("--no-quality", action="store_true", help="skip the bundled-corpus comparison")
    args = parser.parse_args()
    import torch

    print(
        f"machine: {platform.node()} {platform.machine()} {platform.processor() or ''} cpus={os.cpu_count()} "
        f"torch_threads={torch.get_num_threads()} device={args.device} load_avg at start={os.getloadavg()}"
    )
    stages, texts, unique = static_pipeline(args.n, args.device, args.batch_size)
    stages.table(f"static model, {args.n} synthetic kernels, every stage measured:")
    total, total_cpu = sum(stages.wall.values()), sum(stages.cpu.values())
    rest_wall, rest_cpu = total - stages.wall["embed"], total_cpu - stages.cpu["embed"]
    print(f"target < {TARGET_S:.0f} s wall: {'met' if total < TARGET_S else 'NOT met'} ({total:.0f} s)")
    print(
        f"with every kernel distinct (embed measured again, other stages as above): "
        f"{rest_wall + unique['wall']:.0f} s wall, {rest_cpu + unique['cpu']:.0f} CPU s"
    )
    if args.minilm_sample > 0:
        minilm = minilm_extrapolated(texts, min(args.minilm_sample, args.n), args.device, args.batch_size)
        print(
            f"MiniLM pipeline ESTIMATE (extrapolated embed + the other stages as measured with the static model): "
            f"every kernel distinct {minilm['wall_distinct'] + rest_wall:.0f} s wall, "
            f"{minilm['cpu_distinct'] + rest_cpu:.0f} CPU s; this synthetic corpus "
            f"{minilm['wall_corpus'] + rest_wall:.0f} s wall, {minilm['cpu_corpus'] + rest_cpu:.0f} CPU s"
        )
    if not args.no_quality:
        print()
        quality(args.device, args.batch_size)
    print(f"\nload average at the end: {os.getloadavg()} (on {os.cpu_count()} cores; above that the box was shared)")


if __name__ == "__main__":
    main()
