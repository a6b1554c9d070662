"""Query encoders for semantic search: synthetic, the bundled real model, and the reasons when unavailable."""

from __future__ import annotations

import numpy as np

from builder import config
from explorer.embedder import query_encoder
from explorer.sample import SYNTHETIC_EMBEDDING_MODEL, hashed_token_embedding


def test_synthetic_and_missing_models():
    encoder, problem = query_encoder(SYNTHETIC_EMBEDDING_MODEL)
    assert problem is None and encoder is hashed_token_embedding
    encoder, problem = query_encoder(None)
    assert encoder is None and "no embeddings" in problem


def test_unknown_model_is_a_reason_not_an_exception(monkeypatch):
    from builder.embed import model as embed_model
    from builder.errors import UsageError

    def not_offline(name, device=None):
        raise UsageError(f"embedding model {name!r} is not available offline")

    # The real load of an uncached name waits on network timeouts; the adapter's handling is what is tested.
    monkeypatch.setattr(embed_model, "load_model", not_offline)
    encoder, problem = query_encoder("no-such-org/no-such-model-for-explorer-tests")
    assert encoder is None and "could not be loaded" in problem and "not available offline" in problem


def test_adapter_follows_builder_embed_model_contract(monkeypatch):
    """load_model(name) -> (SentenceTransformer, model_id); the query is encoded normalised, in one piece."""
    from builder.embed import model as embed_model
    from explorer import embedder

    class FakeSentenceTransformer:  # loading the real one costs tens of seconds; bench_explorer.py uses it
        def encode(self, texts, normalize_embeddings):
            assert normalize_embeddings and len(texts) == 1
            return np.array([[0.6, 0.8]], dtype=np.float64)

    import torch

    monkeypatch.setattr(embed_model, "load_model", lambda name, device=None: (FakeSentenceTransformer(), name))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # process-wide: not inside the test runner
    embedder._load.cache_clear()
    encoder, problem = query_encoder(config.EMBEDDING_MODEL_ID)
    embedder._load.cache_clear()
    assert problem is None
    vector = encoder("warp shuffle")
    assert vector.dtype == np.float32 and np.allclose(vector, [0.6, 0.8])
