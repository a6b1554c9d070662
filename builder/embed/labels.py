"""Readable cluster labels: class-based TF-IDF over code tokens.

Each cluster's code is treated as one document; a term's weight in cluster c is
tf(t, c) * log(1 + A / f(t)) where tf is the term's share of c's tokens, f(t) its count over all
clusters and A the mean token count per cluster. Terms frequent in one cluster and rare elsewhere win.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from builder import config

# PTX mnemonics keep their dots (cp.async.cg.shared.global, mma.sync.aligned...), identifiers keep
# their underscores (__shfl_down_sync, __shared__) and digits (float4, half2).
_TOKEN = re.compile(
    r"(?<![\w.])(?:(?:cp|mma|wgmma|ldmatrix|red|atom|ld|st|tcgen05)(?:\.[A-Za-z0-9_]+)+|[A-Za-z_][A-Za-z0-9_]*)"
)

# Words every kernel has (C++ keywords, launch boilerplate, generic names): never a label.
STOP_TERMS = frozenset(
    """
    if else for while do return const constexpr void int unsigned signed long short char bool float double
    auto static inline struct class template typename using namespace sizeof true false nullptr break continue
    size_t int64_t int32_t uint32_t uint64_t __global__ __device__ __host__ __forceinline__ __restrict__ restrict
    threadIdx blockIdx blockDim gridDim x y z std torch Tensor at data_ptr size numel options empty zeros
    contiguous dim3 block grid forward input output out in idx tid i j k n m c h w b N M K row col val value
    result stream getCurrentCUDAStream threads blocks num_threads num_blocks block_size grid_size cuda CUDA dtype device kFloat ScalarType TORCH_EXTENSION_NAME
    self def import return nn Module super __init__ model
    """.split()
)


def tokenize_code(text: str) -> list[str]:
    """Code tokens for labels: CUDA identifiers and PTX mnemonics intact, stop terms dropped."""
    return [tok for tok in _TOKEN.findall(text) if len(tok) > 1 and tok not in STOP_TERMS and not tok.isdigit()]


def class_tfidf_labels(
    texts: Sequence[str], cluster_ids: Sequence[int], top_terms: int = config.CLUSTER_LABEL_TERMS
) -> dict[int, str]:
    """cluster id -> label ("term, term, ..."); noise (-1) gets config.NOISE_CLUSTER_LABEL."""
    per_cluster: dict[int, Counter[str]] = {}
    for text, cluster in zip(texts, cluster_ids, strict=True):
        per_cluster.setdefault(int(cluster), Counter()).update(tokenize_code(text))
    labels: dict[int, str] = {}
    if -1 in per_cluster:
        labels[-1] = config.NOISE_CLUSTER_LABEL
    clusters = sorted(c for c in per_cluster if c >= 0)
    if not clusters:
        return labels
    vocabulary = sorted(set().union(*per_cluster.values()))  # noise counts too: its terms are not distinctive
    column = {term: j for j, term in enumerate(vocabulary)}
    counts = np.zeros((len(per_cluster), len(vocabulary)))
    order = sorted(per_cluster)
    for i, cluster in enumerate(order):
        for term, count in per_cluster[cluster].items():
            counts[i, column[term]] = count
    totals = counts.sum(axis=1, keepdims=True)
    tf = counts / np.where(totals > 0, totals, 1)
    term_frequency = counts.sum(axis=0)
    mean_tokens = counts.sum() / len(order)
    idf = np.log1p(mean_tokens / np.where(term_frequency > 0, term_frequency, 1))
    weights = tf * idf
    for i, cluster in enumerate(order):
        if cluster < 0:
            continue
        # Highest weight first; ties broken alphabetically so labels are reproducible.
        ranked = sorted((j for j in np.flatnonzero(weights[i] > 0)), key=lambda j: (-weights[i, j], vocabulary[j]))
        terms = [vocabulary[j] for j in ranked[:top_terms]]
        labels[cluster] = ", ".join(terms) if terms else f"cluster {cluster}"
    return labels
