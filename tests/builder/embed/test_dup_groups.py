from __future__ import annotations

import numpy as np

from builder.embed.dups import duplicate_groups, near_duplicate_pairs


def _unit(rows):
    m = np.asarray(rows, dtype=np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_exact_duplicates_group_across_tasks_singletons_are_none():
    groups = duplicate_groups(["k3", "k1", "k2"], ["1/1", "2/5", "1/1"], ["h", "h", "other"], None)
    assert groups == ["k1", "k1", None]


def test_near_duplicates_only_within_a_task_and_transitively():
    vectors = _unit([[1, 0, 0], [0.995, 0.0998, 0], [0.98, 0.199, 0], [1, 0, 0], [0, 1, 0]])
    # rows 0-1 and 1-2 are near (cos ~0.995), 0-2 is below 0.99; row 3 equals row 0 but is another task
    groups = duplicate_groups(["a", "b", "c", "d", "e"], ["t", "t", "t", "u", "t"], list("12345"), vectors, 0.99)
    assert groups[:3] == ["a", "a", "a"] and groups[3] is None and groups[4] is None


def test_pairs_found_across_block_boundaries():
    rng = np.random.default_rng(0)
    vectors = _unit(rng.normal(size=(2500, 16)))
    vectors[2400] = vectors[3]
    assert (3, 2400) in near_duplicate_pairs(vectors, 0.999)
