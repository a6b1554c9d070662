"""The synthetic archive generator: schema-valid, deterministic, and meaningful embeddings."""

from __future__ import annotations

import numpy as np

from explorer.sample import hashed_token_embedding, synthetic_columns
from explorer.sample_templates import FAMILIES
from schemas import record_from_dict, validate


def _rows(cols, n):
    return [{k: (v[i].tolist() if isinstance(v[i], np.ndarray) else v[i]) for k, v in cols.items()} for i in range(n)]


def test_records_follow_the_schema():
    rows = _rows(synthetic_columns(60, seed=3), 60)
    problems = [p for row in rows for p in validate(record_from_dict(row))]
    assert problems == []
    statuses = {row["status"] for row in rows}
    assert "correct" in statuses and len(statuses) >= 3
    for row in rows:
        assert row["ranking_eligible"] == (row["status"] == "correct" and not row["flags"])
        if row["runtime_ms"] is not None:
            assert np.isclose(row["speedup_eager"], row["eager_ms"] / row["runtime_ms"])


def test_same_seed_same_archive():
    a, b, c = synthetic_columns(20, seed=1), synthetic_columns(20, seed=1), synthetic_columns(20, seed=2)
    assert a["kernel_id"] == b["kernel_id"] and a["kernel_id"] != c["kernel_id"]


def test_hashed_embedding_is_normalised_and_topical():
    warp = hashed_token_embedding("__shfl_down_sync warp reduce")
    assert np.isclose(np.linalg.norm(warp), 1.0)
    families = {f.name: hashed_token_embedding(f.keywords + " " + f.body) for f in FAMILIES}
    best = max(families, key=lambda name: float(families[name] @ warp))
    assert best == "warp"
    assert not hashed_token_embedding("").any()


def test_cluster_labels_are_the_ones_embed_gives_the_families():
    columns = synthetic_columns(200, seed=3)
    labels = dict(zip(columns["cluster_id"], columns["cluster_label"], strict=True))
    assert labels[FAMILIES.index(next(f for f in FAMILIES if f.name == "warp"))] == "warp shuffle"
    assert len(set(labels.values())) == len(labels)  # one distinct label per family
