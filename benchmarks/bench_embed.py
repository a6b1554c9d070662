"""Benchmark of `kernel-archive embed` stages on synthetic kernels (CPU by default).

    .venv/bin/python benchmarks/bench_embed.py [--n 30000] [--embed-sample N] [--device cpu]

Prints seconds per stage, throughput and the machine. With --embed-sample smaller than --n, the model
embeds only that many kernels, the embedding time for all n is extrapolated from the measured rate
(printed as such), and the map/cluster stages run on all n rows using a cheap stand-in vector per
kernel (the mean of MiniLM's input token embeddings over its tokens), so that UMAP/HDBSCAN are timed
at full size on vectors of the same dimension.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from builder import config  # noqa: E402
from builder.embed.code_text import device_code, normalised_hash  # noqa: E402
from builder.embed.dups import duplicate_groups  # noqa: E402
from builder.embed.embed import CodeEmbedder, normalise_rows  # noqa: E402
from builder.embed.labels import class_tfidf_labels  # noqa: E402
from builder.embed.mapping import compute_layout  # noqa: E402
from builder.embed.model import load_model  # noqa: E402
from builder.embed.synthetic import synthetic_kernels  # noqa: E402
from builder.embed.tags import strategy_tags  # noqa: E402


def stand_in_vectors(model, texts: list[str]) -> np.ndarray:
    """Mean input-token embedding per text (no transformer layers): same dimension, cheap."""
    table = model[0].auto_model.get_input_embeddings().weight.detach().numpy()
    ids = model.tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
    return normalise_rows(np.stack([table[row].mean(axis=0) if row else np.zeros(table.shape[1]) for row in ids]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30000)
    parser.add_argument("--embed-sample", type=int, default=None, help="kernels actually embedded (default: all)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=config.EMBED_BATCH_SIZE)
    args = parser.parse_args()
    sample = min(args.n, args.embed_sample or args.n)
    import torch

    print(
        f"machine: {platform.node()} {platform.machine()} {platform.processor() or ''} cpus={os.cpu_count()} "
        f"torch_threads={torch.get_num_threads()} load_avg={os.getloadavg()} device={args.device}"
    )
    stages: dict[str, float] = {}
    cpu: dict[str, float] = {}  # process CPU seconds: on a shared, oversubscribed box wall time overstates

    clock, cpu_clock = time.perf_counter(), time.process_time()
    kernels = synthetic_kernels(args.n, seed=config.RANDOM_STATE, tasks=240)
    stages["generate"], cpu["generate"] = time.perf_counter() - clock, time.process_time() - cpu_clock
    clock, cpu_clock = time.perf_counter(), time.process_time()
    texts = [device_code(k.source, "cuda") for k in kernels]
    stages["strip"], cpu["strip"] = time.perf_counter() - clock, time.process_time() - cpu_clock

    model, model_id = load_model(None, device=args.device)
    embedder = CodeEmbedder(model, model_id, batch_size=args.batch_size)
    clock, cpu_clock = time.perf_counter(), time.process_time()
    embedded = embedder.embed(texts[:sample])
    measured, measured_cpu = time.perf_counter() - clock, time.process_time() - cpu_clock
    rate = sample / measured
    stages["embed"] = measured if sample == args.n else args.n / rate
    cpu["embed"] = measured_cpu * args.n / sample
    print(
        f"embed: {sample} kernels, {embedder.chunks_embedded} distinct chunks in {measured:.1f}s "
        f"= {rate:.1f} kernels/s, {embedder.chunks_embedded / measured:.1f} chunks/s, "
        f"{measured_cpu:.1f} CPU s ({model_id})"
    )
    if sample < args.n:
        print(f"embed: {args.n} kernels extrapolated at that rate: {stages['embed']:.0f}s (not measured)")
        clock, cpu_clock = time.perf_counter(), time.process_time()
        vectors = stand_in_vectors(model, texts)
        print(f"stand-in vectors for the map stages: {time.perf_counter() - clock:.1f}s")
    else:
        vectors = embedded

    clock, cpu_clock = time.perf_counter(), time.process_time()
    layout = compute_layout(vectors, config.RANDOM_STATE)
    stages["map+cluster"], cpu["map+cluster"] = time.perf_counter() - clock, time.process_time() - cpu_clock
    clock, cpu_clock = time.perf_counter(), time.process_time()
    labels = class_tfidf_labels(texts, layout.cluster_ids.tolist())
    stages["labels"], cpu["labels"] = time.perf_counter() - clock, time.process_time() - cpu_clock
    clock, cpu_clock = time.perf_counter(), time.process_time()
    tags = [strategy_tags(k.source, "cuda") for k in kernels]
    stages["tags"], cpu["tags"] = time.perf_counter() - clock, time.process_time() - cpu_clock
    clock, cpu_clock = time.perf_counter(), time.process_time()
    hashes = [normalised_hash(k.source, "cuda") for k in kernels]
    groups = duplicate_groups([f"k{i:06d}" for i in range(args.n)], [k.task_id for k in kernels], hashes, vectors)
    stages["dups"], cpu["dups"] = time.perf_counter() - clock, time.process_time() - cpu_clock

    agree = sum(set(t) == set(k.strategies) for t, k in zip(tags, kernels, strict=True)) / args.n
    print(
        f"rows={args.n} layout={layout.method} clusters={len(labels) - (1 if -1 in labels else 0)} "
        f"noise={(layout.cluster_ids == -1).sum()} dup_groups={len({g for g in groups if g})} "
        f"tags_match_template={agree:.3f}"
    )
    for cluster in sorted(labels)[:6]:
        print(f"  cluster {cluster}: {labels[cluster]}")
    print(f"{'stage':>12}  {'wall s':>8}  {'CPU s':>8}")
    for stage, seconds in stages.items():
        print(f"{stage:>12}: {seconds:8.1f}  {cpu[stage]:8.1f}")
    total = sum(stages.values())
    note = "" if sample == args.n else " (embed extrapolated)"
    print(
        f"{'total':>12}: {total:8.1f}  {sum(cpu.values()):8.1f}{note}  target < 600 s wall: {'met' if total < 600 else 'NOT met'}"
    )
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
