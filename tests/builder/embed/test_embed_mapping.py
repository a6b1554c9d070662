from __future__ import annotations

import numpy as np
import pytest

from builder import config
from builder.embed.mapping import compute_layout


def _blobs(n_per: int, centres: int, dim: int = 32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(centres, dim)) * 4
    points = np.concatenate([means[c] + rng.normal(size=(n_per, dim)) * 0.3 for c in range(centres)])
    return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def forty_point_layouts():
    vectors = _blobs(10, 4)
    return vectors, compute_layout(vectors, config.RANDOM_STATE), compute_layout(vectors.copy(), config.RANDOM_STATE)


def test_umap_layout_is_deterministic(forty_point_layouts):
    _, first, second = forty_point_layouts
    assert first.method == "umap"
    np.testing.assert_array_equal(first.map_xy, second.map_xy)
    np.testing.assert_array_equal(first.cluster_ids, second.cluster_ids)


def test_umap_layout_finds_the_blobs(forty_point_layouts):
    _, layout, _ = forty_point_layouts
    assert layout.map_xy.shape == (40, 2) and np.isfinite(layout.map_xy).all()
    found = layout.cluster_ids
    for blob in range(4):
        members = found[blob * 10 : (blob + 1) * 10]
        assert len(set(members.tolist())) == 1 and members[0] >= 0, members
    assert len(set(found.tolist())) == 4


@pytest.mark.parametrize("n_rows", [0, 1, 2, 5, 14])
def test_small_inputs_still_get_a_layout(n_rows):
    vectors = _blobs(7, 2)[:n_rows]
    layout = compute_layout(vectors, config.RANDOM_STATE)
    assert layout.map_xy.shape == (n_rows, 2) and layout.cluster_ids.shape == (n_rows,)
    assert layout.method == ("trivial" if n_rows < 3 else "pca")
    again = compute_layout(vectors, config.RANDOM_STATE)
    np.testing.assert_array_equal(layout.map_xy, again.map_xy)
    if n_rows == 14:  # two tight blobs of seven: found by HDBSCAN on the PCA space
        assert set(layout.cluster_ids[:7]) != set(layout.cluster_ids[7:]) and -1 not in layout.cluster_ids
