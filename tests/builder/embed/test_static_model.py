"""The static embedding model distilled from the bundled MiniLM (builder/embed/static_model.py).

Distilling MiniLM's full 30k-token vocabulary costs ~2 CPU minutes, so these tests distil a restricted
vocabulary (single characters and `##` + character pieces, ~2k tokens, ~8 CPU s) through the same code
path; `config.STATIC_EMBED_TOKEN_REMOVE_PATTERN` is the knob, monkeypatched where `load_model` is used.
"""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from embed_helpers import make_records, read_rows, run_cli, write_dataset

from builder import config
from builder.embed import static_model
from builder.embed.embed import CodeEmbedder
from builder.embed.model import load_model, resolve_model
from builder.embed.static_model import MANIFEST_NAME, StaticDistillSettings, ensure_distilled
from builder.errors import UsageError

# Removes every vocabulary entry except the special tokens and single (optionally ##-prefixed) characters.
CHARACTER_VOCABULARY = r"(?!\[(?:UNK|PAD|CLS|SEP|MASK)\]$)(?!(?:##)?.$).+"
SETTINGS = StaticDistillSettings(token_remove_pattern=CHARACTER_VOCABULARY)
STATIC_ID = "sentence-transformers/all-MiniLM-L6-v2@static-distilled-256"  # the shipped settings' id
TEST_ID = SETTINGS.model_id  # the restricted vocabulary's own id
LONG_KERNEL = "\n".join(
    f"__global__ void k{i}(const float4* x, float* y) {{ y[{i}] = __shfl_down_sync(~0u, x[{i}].w, {i % 16}); }}"
    for i in range(40)
)


@pytest.fixture(scope="module")
def distilled(tmp_path_factory):
    """One restricted distillation for the module: (cache base dir, model folder)."""
    base = tmp_path_factory.mktemp("ka-cache")
    folder, fresh = ensure_distilled(SETTINGS, base / config.STATIC_EMBED_CACHE_SUBDIR)
    assert fresh
    return base, folder


@pytest.fixture
def distill_calls(monkeypatch):
    """Counts real distillations (the wrapped function still runs)."""
    calls = []
    real = static_model._distill_into

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(static_model, "_distill_into", counting)
    return calls


@pytest.fixture
def static_config(distilled, monkeypatch):
    """Point config (cache dir, vocabulary pattern) at the module's distilled model."""
    base, _ = distilled
    monkeypatch.setattr(config, "CACHE_DIR", base)
    monkeypatch.setattr(config, "STATIC_EMBED_TOKEN_REMOVE_PATTERN", CHARACTER_VOCABULARY)
    return base


def test_model_ids_name_the_distillation(monkeypatch):
    for name in (config.STATIC_EMBEDDING_MODEL, *config.STATIC_EMBEDDING_MODEL_ALIASES, STATIC_ID):
        spec = resolve_model(name)
        assert spec.static and spec.model_id == STATIC_ID
    assert not resolve_model(None).static  # the default stays the transformer MiniLM
    # other settings, other id: rows embedded with one distillation are not kept for another
    assert TEST_ID.startswith(STATIC_ID + "-") and len(TEST_ID) == len(STATIC_ID) + 9
    monkeypatch.setattr(config, "STATIC_EMBED_PCA_DIMS", 128)
    assert resolve_model(config.STATIC_EMBEDDING_MODEL).model_id.endswith("@static-distilled-128")
    with pytest.raises(UsageError, match="distilled with other settings") as info:
        resolve_model(STATIC_ID)  # e.g. the explorer on an archive embedded before the change
    assert "\n" not in str(info.value)


def test_alias_and_stored_id_load_the_cached_model(static_config, distill_calls):
    assert resolve_model(config.STATIC_EMBEDDING_MODEL).model_id == TEST_ID == resolve_model(TEST_ID).model_id
    model, model_id = load_model(config.STATIC_EMBEDDING_MODEL, device="cpu")
    assert model_id == TEST_ID and distill_calls == []  # the module's cache, not a new distillation
    embedder = CodeEmbedder(model, model_id)
    assert embedder.chunk(LONG_KERNEL) == [LONG_KERNEL]  # no window: one chunk, all of it
    short = "__global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }"
    vectors = embedder.embed([short, LONG_KERNEL, short, LONG_KERNEL + "\nint atomic_tail_marker;"])
    assert vectors.dtype == np.float32 and vectors.shape == (4, 256)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(vectors[0], vectors[2])
    assert len(model.tokenizer(LONG_KERNEL, add_special_tokens=False)["input_ids"]) > 1000
    assert not np.array_equal(vectors[1], vectors[3])  # tokens past 512 count (no silent truncation)

    # what the explorer does with the id stored in the records: the same model, the same vectors
    again, again_id = load_model(TEST_ID, device="cpu")
    assert again_id == TEST_ID and distill_calls == []
    query = again.encode([short], normalize_embeddings=True)[0]
    np.testing.assert_allclose(query, vectors[0], atol=1e-6)


def test_cache_is_reused_and_a_corrupt_one_rebuilt_identically(distilled, tmp_path, distill_calls):
    _, original = distilled
    root = tmp_path / "cache"
    copy = root / original.name
    shutil.copytree(original, copy)
    (root / f".tmp-{original.name}-killed").mkdir()  # what a killed distillation leaves behind
    (root / f".tmp-{original.name}-killed" / "model.safetensors").write_bytes(b"half")

    assert ensure_distilled(SETTINGS, root) == (copy, False) and distill_calls == []

    weights = copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    folder, fresh = ensure_distilled(SETTINGS, root)
    assert folder == copy and fresh and len(distill_calls) == 1
    # deterministic: the second distillation is bit-identical to the first
    rebuilt = json.loads((folder / MANIFEST_NAME).read_text())["files"]
    first = json.loads((original / MANIFEST_NAME).read_text())["files"]
    assert rebuilt["model.safetensors"] == first["model.safetensors"]
    assert rebuilt == first
    # the rebuild went through its own temporary folder, renamed into place (only the killed one remains)
    assert sorted(p.name for p in root.iterdir()) == sorted([copy.name, f".tmp-{original.name}-killed"])


def test_distillation_failure_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("CUDA out of memory\nTraceback (most recent call last): ...")

    monkeypatch.setattr("model2vec.distill.distill", broken)
    root = tmp_path / "cache"
    with pytest.raises(UsageError) as info:
        ensure_distilled(SETTINGS, root)
    assert "distilling the static embedding model" in str(info.value) and "\n" not in str(info.value)
    assert list(root.iterdir()) == []

    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with pytest.raises(UsageError, match="cannot write the static embedding cache"):
        ensure_distilled(SETTINGS, not_a_dir)


def test_cli_embed_with_the_static_model(tmp_path, static_config, distill_calls, monkeypatch, capsys):
    dataset = tmp_path / "dataset"
    write_dataset(dataset, make_records(8, seed=3))
    code, out, err = run_cli(["embed", str(dataset), "--model", config.STATIC_EMBEDDING_MODEL], monkeypatch, capsys)
    assert code == 0, err
    chunks = re.search(r"8 rows: 8 embedded \((\d+) chunks", out)
    assert chunks and 1 <= int(chunks.group(1)) <= 8 and TEST_ID in out  # one chunk per distinct kernel
    rows = read_rows(dataset)
    assert {row["embedding_model"] for row in rows} == {TEST_ID}
    assert all(len(row["embedding"]) == 256 and row["map_x"] is not None and row["cluster_label"] for row in rows)

    # incremental: the stored id is recognised as the same model, so nothing is embedded again
    code, out, _ = run_cli(["embed", str(dataset), "--model", TEST_ID], monkeypatch, capsys)
    assert code == 0 and "8 rows: 0 embedded" in out
    assert distill_calls == []
