"""Duplicate groups: exact copies (normalised-source hash) anywhere in the archive, and near copies
(embedding cosine >= config.NEAR_DUPLICATE_COSINE) among kernels of the same task, merged by union-find.

A group's id is the smallest kernel_id among its members; a kernel with no duplicate gets None
(so `dup_group IS NOT NULL` selects every kernel that has a copy).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from builder import config

_BLOCK_ROWS = 2048  # rows per block of the cosine matrix: bounds memory at 2048 x n floats


class UnionFind:
    def __init__(self, size: int) -> None:
        self.parent = list(range(size))

    def find(self, item: int) -> int:
        root = item
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[item] != root:  # path compression
            self.parent[item], item = root, self.parent[item]
        return root

    def union(self, a: int, b: int) -> None:
        root_a, root_b = self.find(a), self.find(b)
        if root_a != root_b:
            self.parent[max(root_a, root_b)] = min(root_a, root_b)


def near_duplicate_pairs(embeddings: np.ndarray, threshold: float) -> list[tuple[int, int]]:
    """(i, j), i < j, of L2-normalised rows whose cosine similarity is at least threshold."""
    vectors = np.asarray(embeddings, dtype=np.float32)
    pairs: list[tuple[int, int]] = []
    for start in range(0, len(vectors), _BLOCK_ROWS):
        block = vectors[start : start + _BLOCK_ROWS] @ vectors.T
        rows, cols = np.nonzero(block >= threshold)
        rows = rows + start
        keep = rows < cols
        pairs.extend(zip(rows[keep].tolist(), cols[keep].tolist(), strict=True))
    return pairs


def duplicate_groups(
    kernel_ids: Sequence[str],
    task_ids: Sequence[str],
    source_hashes: Sequence[str],
    embeddings: np.ndarray | None,
    threshold: float = config.NEAR_DUPLICATE_COSINE,
) -> list[str | None]:
    """dup_group per row (see the module docstring)."""
    size = len(kernel_ids)
    groups = UnionFind(size)
    first_with_hash: dict[str, int] = {}
    for row, digest in enumerate(source_hashes):
        groups.union(first_with_hash.setdefault(digest, row), row)
    if embeddings is not None and size:
        rows_of_task: dict[str, list[int]] = defaultdict(list)
        for row, task in enumerate(task_ids):
            rows_of_task[task].append(row)
        for rows in rows_of_task.values():
            if len(rows) < 2:
                continue
            for a, b in near_duplicate_pairs(embeddings[rows], threshold):
                groups.union(rows[a], rows[b])
    members: dict[int, list[int]] = defaultdict(list)
    for row in range(size):
        members[groups.find(row)].append(row)
    result: list[str | None] = [None] * size
    for rows in members.values():
        if len(rows) > 1:
            group_id = min(kernel_ids[row] for row in rows)
            for row in rows:
                result[row] = group_id
    return result
