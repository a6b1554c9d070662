from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def minilm():
    """The bundled default model, loaded once for the whole test session (offline)."""
    from builder.embed.model import load_model

    model, model_id = load_model(None, device="cpu")
    return model, model_id
