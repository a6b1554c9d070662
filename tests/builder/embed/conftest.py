from __future__ import annotations

import pytest


class CountingModel:
    """Wraps a SentenceTransformer and counts what it is asked to encode."""

    def __init__(self, model):
        self._model = model
        self.encode_calls = 0
        self.texts_encoded = 0

    def encode(self, texts, **kwargs):
        self.encode_calls += 1
        self.texts_encoded += len(texts)
        return self._model.encode(texts, **kwargs)

    def __getattr__(self, name):
        return getattr(self._model, name)


@pytest.fixture(scope="session")
def minilm():
    """The bundled default model, loaded once for the whole test session (offline)."""
    from builder.embed.model import load_model

    model, model_id = load_model(None, device="cpu")
    return model, model_id
