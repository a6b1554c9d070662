"""The 2-D map and the clusters: UMAP (or PCA for tiny inputs) + HDBSCAN, reproducible."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from builder import config


@dataclass
class Layout:
    map_xy: np.ndarray  # (n, 2) float32
    cluster_ids: np.ndarray  # (n,) int32, -1 = noise
    method: str  # "umap", "pca" or "trivial": how the coordinates were made


def min_cluster_size(n_rows: int) -> int:
    scaled = round(n_rows * config.HDBSCAN_CLUSTER_FRACTION)
    return int(min(config.HDBSCAN_MAX_MIN_CLUSTER_SIZE, max(config.HDBSCAN_MIN_CLUSTER_SIZE, scaled)))


def compute_layout(embeddings: np.ndarray, random_state: int = config.RANDOM_STATE) -> Layout:
    """Map coordinates and cluster ids for L2-normalised embeddings; same input -> same output."""
    vectors = np.asarray(embeddings, dtype=np.float32)
    n_rows = len(vectors)
    if n_rows < 3:  # nothing to cluster: the points sit on a line, all noise
        xy = np.zeros((n_rows, 2), dtype=np.float32)
        xy[:, 0] = np.arange(n_rows, dtype=np.float32)
        return Layout(xy, np.full(n_rows, -1, dtype=np.int32), "trivial")
    if n_rows < config.UMAP_MIN_ROWS:
        return _pca_layout(vectors, random_state)
    return _umap_layout(vectors, random_state)


def _pca_layout(vectors: np.ndarray, random_state: int) -> Layout:
    """Tiny inputs: PCA for both the map and the clustering space, clusters of two allowed."""
    from sklearn.decomposition import PCA

    n_rows = len(vectors)
    reduced = PCA(n_components=min(config.MAP_CLUSTER_DIMS, n_rows - 1), random_state=random_state).fit_transform(
        vectors
    )
    xy = np.zeros((n_rows, 2), dtype=np.float32)
    xy[:, : min(2, reduced.shape[1])] = reduced[:, :2]
    return Layout(xy, _hdbscan(reduced, min_size=2), "pca")


def _umap_layout(vectors: np.ndarray, random_state: int) -> Layout:
    import umap
    from umap.umap_ import nearest_neighbors

    n_neighbors = min(config.UMAP_NEIGHBORS, len(vectors) - 1)
    with warnings.catch_warnings():
        # umap warns that a fixed random_state disables parallelism: reproducibility is the point.
        warnings.filterwarnings("ignore", message=".*random_state.*", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*n_jobs.*", category=UserWarning)
        # One k-NN graph serves both embeddings (the expensive part on large archives).
        knn = nearest_neighbors(
            vectors,
            n_neighbors,
            "cosine",
            {},
            angular=False,
            random_state=np.random.RandomState(random_state),
            low_memory=True,
            n_jobs=1,  # NN-descent's result depends on the thread count: one thread gives every machine the same map
        )
        # PCA initialisation: UMAP's default spectral one is not reproducible on archives full of near
        # copies (its eigensolver fails, and what it falls back to gives a different layout on every fit).
        common = {
            "n_neighbors": n_neighbors,
            "metric": "cosine",
            "random_state": random_state,
            "precomputed_knn": knn,
            "init": "pca",
        }
        cluster_space = umap.UMAP(n_components=config.MAP_CLUSTER_DIMS, min_dist=0.0, **common).fit_transform(vectors)
        xy = umap.UMAP(n_components=2, min_dist=config.UMAP_MIN_DIST_MAP, **common).fit_transform(vectors)
    return Layout(np.asarray(xy, dtype=np.float32), _hdbscan(cluster_space, min_cluster_size(len(vectors))), "umap")


def _hdbscan(points: np.ndarray, min_size: int) -> np.ndarray:
    from sklearn.cluster import HDBSCAN

    if len(points) <= min_size:
        return np.full(len(points), -1, dtype=np.int32)
    labels = HDBSCAN(min_cluster_size=min_size, copy=True).fit_predict(np.asarray(points, dtype=np.float64))
    return _renumber_by_size(labels)


def _renumber_by_size(labels: np.ndarray) -> np.ndarray:
    """Cluster 0 is the largest, then 1, ...; ties by first appearance (stable ids across runs)."""
    ids, first, counts = np.unique(labels[labels >= 0], return_index=True, return_counts=True)
    order = sorted(range(len(ids)), key=lambda i: (-counts[i], first[i]))
    mapping = {int(ids[old]): new for new, old in enumerate(order)}
    return np.array([mapping.get(int(label), -1) for label in labels], dtype=np.int32)
