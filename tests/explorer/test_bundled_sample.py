"""The sample archive shipped in data/sample/ (the explorer's default): real GPU records, complete, loadable."""

from __future__ import annotations

import datasets
import pytest

from builder import config
from builder.embed.code_text import device_code
from builder.embed.label_terms import kernel_terms, vocabulary_words
from builder.embed.labels import cluster_labels, label_phrases
from explorer.query import Archive
from explorer.sources import default_source, resolve_source


@pytest.fixture(scope="module")
def sample() -> Archive:
    assert default_source() == str(config.SAMPLE_ARCHIVE_DIR)
    source = resolve_source(str(config.SAMPLE_ARCHIVE_DIR))
    assert source.kind == "archive" and not source.synthetic
    return Archive(source)


def test_sample_holds_real_gpu_records_of_every_verdict(sample):
    rows = sample.df(
        "SELECT count(*) AS n, count(DISTINCT task_id) AS tasks, count(DISTINCT level) AS levels, "
        "count(*) FILTER (WHERE status = 'correct') AS correct, "
        "count(*) FILTER (WHERE status <> 'correct') AS failed, "
        "count(*) FILTER (WHERE gpu_name IS NULL OR backend <> 'cuda') AS not_gpu, "
        "count(*) FILTER (WHERE isolation <> 'bwrap') AS not_sandboxed, "
        "count(*) FILTER (WHERE map_x IS NULL OR cluster_label IS NULL) AS unmapped, "
        "count(*) FILTER (WHERE status = 'correct' AND (runtime_ms IS NULL OR eager_ms IS NULL)) AS untimed "
        "FROM kernels"
    ).iloc[0]
    assert rows["n"] == sample.size >= 100 and rows["levels"] == 3 and rows["tasks"] >= 40
    assert rows["correct"] > 0 and rows["failed"] > 0
    assert rows["not_gpu"] == 0 and rows["not_sandboxed"] == 0
    assert rows["unmapped"] == 0 and rows["untimed"] == 0


def test_sample_loads_with_datasets_in_every_config(sample, tmp_path):
    default = datasets.load_dataset(str(config.SAMPLE_ARCHIVE_DIR), cache_dir=str(tmp_path))
    assert sum(len(split) for split in default.values()) == sample.size
    for name in ("sakana", "sft", "preference"):
        assert len(datasets.load_dataset(str(config.SAMPLE_ARCHIVE_DIR), name, cache_dir=str(tmp_path)))


def test_sample_cluster_labels_speak_the_kernel_vocabulary(sample):
    """Labels name ops and strategies ("GEMM · shared-memory tiling"), never variable names, and are current."""
    rows = sample.df(
        "SELECT kernel_id, op_category, op_name, strategy_tags, cuda_code, language, cluster_id, cluster_label "
        "FROM records"
    )
    shipped = dict(zip(rows["cluster_id"], rows["cluster_label"], strict=True))
    old_identifier_soup = {
        "TILE, in_f, out_f, wrow",
        "cols, offset, lane, scratch",
        "kk, sa, sak, sam",
        "d2, d1, base, kChunk",
    }
    assert not old_identifier_soup & set(shipped.values())
    words = vocabulary_words()
    for cluster, label in shipped.items():
        assert cluster == -1 or set(label_phrases(label)) <= words, label
    clustered = [label for cluster, label in shipped.items() if cluster >= 0]
    assert len(clustered) == len(set(clustered)) >= 5
    terms = [
        kernel_terms(
            row.op_category, row.op_name, list(row.strategy_tags), device_code(row.cuda_code or "", row.language)
        )
        for row in rows.itertuples()
    ]
    assert cluster_labels(terms, rows["cluster_id"].tolist(), rows["kernel_id"].tolist()) == shipped
