from __future__ import annotations

import numpy as np
import pytest
from embed_helpers import CountingModel, make_records, read_rows, run_cli, write_dataset

from builder import config
from builder.embed.annotate import embed_dataset
from builder.embed.embed import CodeEmbedder

N_ROWS = 40


@pytest.fixture(scope="module")
def counting_factory(minilm):
    model, model_id = minilm
    spies = []

    def factory_for(spy_list):
        def make():
            spy = CountingModel(model)
            spy_list.append(spy)
            return CodeEmbedder(spy, model_id)

        return make

    return factory_for, spies


@pytest.mark.slow  # three embed runs over an archive (~60 s)
def test_embed_fills_every_column_incrementally(tmp_path, counting_factory):
    factory_for, _ = counting_factory
    records = make_records(N_ROWS + 5, seed=1)
    write_dataset(tmp_path, records[:N_ROWS])
    spies = []
    first = embed_dataset(tmp_path, embedder_factory=factory_for(spies))
    rows = read_rows(tmp_path)
    assert first.embedded == N_ROWS and first.refitted and first.layout_method == "umap"
    for row in rows:
        assert len(row["embedding"]) == 384 and row["embedding_model"] == config.EMBEDDING_MODEL_ID
        assert row["map_x"] is not None and row["cluster_id"] is not None and row["cluster_label"]
        assert row["strategy_tags"] and set(row["strategy_tags"]) <= set(config.STRATEGY_TAGS)
    assert any(row["cluster_id"] >= 0 for row in rows)
    assert {row["cluster_label"] for row in rows if row["cluster_id"] == -1} <= {config.NOISE_CLUSTER_LABEL}

    # a second run embeds nothing and keeps the map
    second = embed_dataset(tmp_path, embedder_factory=factory_for(spies))
    assert second.embedded == 0 and not second.refitted and len(spies) == 1
    assert [r["map_x"] for r in read_rows(tmp_path)] == [r["map_x"] for r in rows]

    # new rows: only they are encoded; the layout is refitted so they get coordinates
    write_dataset(tmp_path, records)  # rewrites the splits with 5 more rows (old rows carry no embedding now)
    merged = {r["kernel_id"]: r for r in read_rows(tmp_path)}
    for row in rows:
        merged[row["kernel_id"]] = row
    write_dataset(tmp_path, list(merged.values()))
    spies.clear()
    third = embed_dataset(tmp_path, embedder_factory=factory_for(spies))
    new_ids = {r["kernel_id"] for r in records[N_ROWS:]} - {r["kernel_id"] for r in rows}
    assert third.embedded == len(new_ids) and third.refitted
    assert spies[0].encode_calls == 1 and spies[0].texts_encoded <= len(new_ids) * config.EMBED_MAX_CHUNKS
    assert all(r["map_x"] is not None for r in read_rows(tmp_path))


def test_same_input_same_map(tmp_path, counting_factory):
    factory_for, _ = counting_factory
    write_dataset(tmp_path, make_records(N_ROWS, seed=2))

    def layout_columns():
        return [
            (r["map_x"], r["map_y"], r["cluster_id"], r["cluster_label"], r["dup_group"]) for r in read_rows(tmp_path)
        ]

    spies = []
    embed_dataset(tmp_path, embedder_factory=factory_for(spies))
    first = layout_columns()
    refit = embed_dataset(tmp_path, refit=True, embedder_factory=factory_for(spies))
    assert refit.refitted and refit.embedded == 0 and len(spies) == 1  # same embeddings, layout recomputed
    assert layout_columns() == first
    assert np.isfinite(np.array([row[:2] for row in first], dtype=float)).all()


def test_cli_unknown_model_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    write_dataset(tmp_path, make_records(3))
    before = sorted((p.name, p.read_bytes()) for p in (tmp_path / "data").iterdir())
    code, _, err = run_cli(["embed", str(tmp_path), "--model", "nobody/missing-model-123"], monkeypatch, capsys)
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1
    assert "nobody/missing-model-123" in err and "not available offline" in err
    assert sorted((p.name, p.read_bytes()) for p in (tmp_path / "data").iterdir()) == before


def test_cli_refit_on_small_dataset(tmp_path, minilm, monkeypatch, capsys):
    write_dataset(tmp_path, make_records(4))
    model, _ = minilm
    # the CLI loads the default model itself: hand it the session's copy instead of loading it again
    monkeypatch.setattr("sentence_transformers.SentenceTransformer", lambda *a, **k: model)
    code, out, err = run_cli(["embed", str(tmp_path), "--refit", "--batch-size", "4"], monkeypatch, capsys)
    assert code == 0, err
    assert "4 rows: 4 embedded" in out and "map pca" in out
    assert all(r["cluster_label"] for r in read_rows(tmp_path))
    code, out, _ = run_cli(["embed", str(tmp_path), "--refit"], monkeypatch, capsys)
    assert code == 0 and "4 rows: 0 embedded" in out and "map pca" in out
