"""Encode a search query with the archive's embedding model, for semantic search.

Real archives name a sentence-transformers model (`embedding_model`); it is loaded through builder.embed.model
(load_model(name) -> (SentenceTransformer, model_id), strictly offline), imported lazily because it pulls in
torch. A query is short, so it is encoded in one piece (kernels are chunked and pooled at embed time). Synthetic archives use
explorer.sample's hashed-token encoder. When no encoder can be had, the caller falls back to full-text search
and shows the reason returned here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import lru_cache

import numpy as np

from explorer.sample import SYNTHETIC_EMBEDDING_MODEL, hashed_token_embedding

Encoder = Callable[[str], np.ndarray]
_LOCK = threading.Lock()


@lru_cache(maxsize=4)
def _load(model_name: str) -> Encoder:
    from builder.embed import model as embed_model  # lazy: torch + sentence-transformers

    if hasattr(embed_model, "embed_query"):
        return lambda text: np.asarray(embed_model.embed_query(text, model_name), dtype=np.float32)
    import torch

    # A query is a few tokens: intra-op threads only spin against the server's other work on a small box.
    torch.set_num_threads(1)
    loaded = embed_model.load_model(model_name)  # (SentenceTransformer, model_id)
    model = loaded[0] if isinstance(loaded, tuple) else loaded
    return lambda text: np.asarray(model.encode([text], normalize_embeddings=True)[0], dtype=np.float32)


def query_encoder(model_name: str | None) -> tuple[Encoder | None, str | None]:
    """(encoder, None) or (None, why semantic search is unavailable)."""
    if not model_name:
        return None, "this archive has no embeddings (run `kernel-archive embed`)"
    if model_name == SYNTHETIC_EMBEDDING_MODEL:
        return hashed_token_embedding, None
    try:
        with _LOCK:  # one load per model even when several sessions search at once
            return _load(model_name), None
    except Exception as exc:  # noqa: BLE001 - missing module, missing weights, bad name: all mean "fall back"
        return None, f"the embedding model {model_name!r} could not be loaded ({type(exc).__name__}: {exc})"
