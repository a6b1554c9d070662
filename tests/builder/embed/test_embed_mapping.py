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


def test_layout_is_deterministic_on_an_archive_full_of_near_copies():
    # Many exact and near duplicates (as real archives have) made UMAP's spectral initialisation fail and
    # fall back to a layout that differed on every fit, even in one process with the same random_state.
    rng = np.random.default_rng(0)
    prototypes = rng.normal(size=(30, 32)).astype(np.float32)
    vectors = prototypes[rng.integers(0, 30, size=300)]
    vectors = vectors + rng.normal(scale=0.01, size=vectors.shape).astype(np.float32) * (rng.random(300) < 0.3)[:, None]
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    first, second = compute_layout(vectors), compute_layout(vectors)
    assert first.method == "umap"
    assert np.array_equal(first.map_xy, second.map_xy)
    assert np.array_equal(first.cluster_ids, second.cluster_ids) and first.cluster_ids.max() >= 1
