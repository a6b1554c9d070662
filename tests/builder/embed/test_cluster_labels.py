from __future__ import annotations

import random

from builder import config
from builder.embed.label_terms import kernel_terms, vocabulary_words
from builder.embed.labels import LABEL_SEPARATOR, cluster_labels, label_phrases


def test_kernel_terms_come_from_recorded_signals_not_identifiers():
    code = "float TILE_in_f = 0; cublasSgemm(handle, a, b); auto y = at::matmul(x, w); __shared__ float sak[32];"
    terms = kernel_terms("conv_epilogue", "conv_transpose3d_leaky_relu_scale", ["naive", "fusion"], code)
    assert terms == {
        "category:conv_epilogue",
        "family:conv",
        "op:transposed",
        "op:activation",
        "tag:naive",
        "tag:fusion",
        "library:cublas",
        "library:aten",
    }
    assert kernel_terms(None, None, None, "int kk = sa[sam];") == set()


def test_task_op_words_split_at_underscores_keep_joined_ops():
    assert "op:norm" in kernel_terms("normalization", "residual_add_layer_norm", [], "")
    assert "op:pool" in kernel_terms("pooling", "avg_pool1d", [], "")
    assert "op:conv3d" in kernel_terms("conv_epilogue", "conv3d_relu_avgpool", [], "")


def _cluster(n, category, op, tags, cluster, start):
    return [(kernel_terms(category, op, tags, ""), cluster, f"k{start + i:04d}") for i in range(n)]


def _labels(rows):
    terms, clusters, ids = zip(*rows, strict=True)
    return cluster_labels(list(terms), list(clusters), list(ids))


def test_labels_read_op_then_strategy():
    rows = (
        _cluster(6, "matmul", "square_matmul", ["shared_memory_tiling", "loop_unrolling"], 0, 0)
        + _cluster(6, "reduction", "sum_reduction", ["warp_shuffle"], 1, 100)
        + _cluster(6, "activation", "relu", ["vectorized_loads", "grid_stride"], 2, 200)
        + _cluster(2, "loss", "mse_loss", ["naive"], -1, 300)
    )
    labels = _labels(rows)
    assert labels[0] == f"GEMM{LABEL_SEPARATOR}shared-memory tiling"  # the strategy outranks the unrolling
    assert labels[1] == f"reductions{LABEL_SEPARATOR}warp shuffle"
    assert labels[2] == f"activations{LABEL_SEPARATOR}float4 loads"
    assert labels[-1] == config.NOISE_CLUSTER_LABEL


def test_a_term_held_by_a_minority_is_not_claimed():
    rows = _cluster(4, "reduction", "sum_reduction", ["naive"], 0, 0) + _cluster(
        1, "reduction", "sum_reduction", ["atomics"], 0, 10
    )
    rows += _cluster(5, "softmax", "softmax", ["warp_shuffle"], 1, 100)
    assert "atomics" not in _labels(rows)[0]


def test_mixed_ops_name_the_family():
    rows = (
        _cluster(3, "softmax", "softmax", ["warp_shuffle"], 0, 0)
        + _cluster(3, "loss", "mse_loss", ["warp_shuffle"], 0, 10)
        + _cluster(3, "normalization", "layer_norm", ["warp_shuffle"], 0, 20)
        + _cluster(6, "matmul", "square_matmul", ["naive"], 1, 100)
    )
    assert _labels(rows)[0] == f"row reductions{LABEL_SEPARATOR}warp shuffle"


def test_clusters_alike_are_told_apart_by_their_next_terms_then_numbered():
    rows = (
        _cluster(5, "convolution", "conv1d", ["naive"], 0, 0)
        + _cluster(5, "convolution", "conv3d", ["naive"], 1, 100)
        + _cluster(5, "elementwise", "elementwise_fma", ["naive"], 2, 200)
        + _cluster(5, "elementwise", "elementwise_fma", ["naive"], 3, 300)
    )
    labels = _labels(rows)
    assert labels[0] == f"convolution (1-D){LABEL_SEPARATOR}naive"
    assert labels[1] == f"convolution (3-D){LABEL_SEPARATOR}naive"
    # Nothing in the vocabulary separates 2 and 3: numbered by their smallest kernel id.
    assert labels[2] == f"elementwise{LABEL_SEPARATOR}naive" and labels[3] == f"elementwise{LABEL_SEPARATOR}naive #2"


def test_same_members_same_label_whatever_the_ids_and_order():
    rows = (
        _cluster(5, "convolution", "conv1d", ["naive"], 0, 0)
        + _cluster(5, "convolution", "conv3d", ["naive"], 1, 100)
        + _cluster(7, "matmul", "batched_matmul", ["tensor_cores"], 2, 200)
        + _cluster(3, "loss", "kl_div_loss", ["warp_shuffle"], -1, 300)
    )
    by_members = {frozenset(i for _, c, i in rows if c == k): label for k, label in _labels(rows).items()}
    renumber = {0: 2, 1: 0, 2: 1, -1: -1}
    shuffled = [(t, renumber[c], i) for t, c, i in rows]
    random.Random(3).shuffle(shuffled)
    again = {frozenset(i for _, c, i in shuffled if c == k): label for k, label in _labels(shuffled).items()}
    assert again == by_members


def test_every_label_is_made_of_vocabulary_words():
    categories = ["matmul", "convolution", "reduction", "softmax", "attention", "pooling"]
    tags = list(config.STRATEGY_TAGS)
    rng = random.Random(5)
    rows = []
    for i in range(300):
        picked = rng.sample(tags, 2)
        rows.append((kernel_terms(rng.choice(categories), "op", picked, ""), i % 12, f"k{i:04d}"))
    words = vocabulary_words()
    for label in _labels(rows).values():
        assert set(label_phrases(label)) <= words, label


def test_a_cluster_without_terms_gets_a_name():
    assert cluster_labels([set(), set()], [0, 0], ["a", "b"]) == {0: "cluster 0"}
