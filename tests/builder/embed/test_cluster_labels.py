from __future__ import annotations

from builder import config
from builder.embed.labels import class_tfidf_labels, tokenize_code


def test_tokenizer_keeps_cuda_identifiers_and_ptx():
    code = (
        "__shared__ float4 t[4]; v += __shfl_down_sync(0xffffffff, v, 8); __syncthreads(); "
        'wmma::mma_sync(c, a, b, c); asm("cp.async.ca.shared.global [%0], [%1], 16;"); half2 h;'
    )
    tokens = set(tokenize_code(code))
    for keep in (
        "__shfl_down_sync",
        "__syncthreads",
        "float4",
        "wmma",
        "mma_sync",
        "half2",
        "cp.async.ca.shared.global",
    ):
        assert keep in tokens, keep
    assert not {"float", "for", "v", "t"} & tokens


def test_shared_qualifier_survives_tokenising():
    assert "__shared__" in tokenize_code("__shared__ float tile[32][33];")


def test_labels_name_the_distinctive_terms_and_noise():
    texts = [
        "v += __shfl_down_sync(0xffffffff, v, 16); warp_reduce(v);",
        "v += __shfl_xor_sync(0xffffffff, v, 8); warp_reduce(v);",
        "atomicAdd(&bins[slot], 1); histogram(slot);",
        "atomicAdd(&counts[slot], 2); histogram(slot);",
        "y[i] = x[i];",
    ]
    labels = class_tfidf_labels(texts, [0, 0, 1, 1, -1], top_terms=3)
    assert labels[-1] == config.NOISE_CLUSTER_LABEL
    assert "warp_reduce" in labels[0] and "atomicAdd" not in labels[0]
    assert "atomicAdd" in labels[1] and "histogram" in labels[1] and "slot" in labels[1]
    assert len(labels[0].split(", ")) == 3


def test_every_cluster_gets_a_non_empty_label():
    labels = class_tfidf_labels(["", "for (;;) {}", "saxpy(a, x)"], [0, 1, 2])
    assert all(labels[c] for c in (0, 1, 2))
    assert labels[0] == "cluster 0" and "saxpy" in labels[2]
