from __future__ import annotations

from pathlib import Path

import pytest

from builder import config
from builder.embed.tags import strategy_tags

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "embed" / "tags"
POSITIVE = sorted(tag for tag in config.STRATEGY_TAGS)


def _tags(name: str) -> list[str]:
    return strategy_tags((FIXTURES / name).read_text(), "cuda")


@pytest.mark.parametrize("tag", POSITIVE)
def test_each_fixture_is_tagged_with_its_strategy(tag):
    assert tag in _tags(f"{tag}.cu")


def test_single_strategy_fixtures_get_nothing_else():
    # Each fixture shows exactly its strategy; fusion, grid-stride and unrolling alone are still naive code.
    for tag in POSITIVE:
        expected = ["naive", tag] if tag in ("fusion", "grid_stride", "loop_unrolling") else [tag]
        assert _tags(f"{tag}.cu") == expected, tag


def test_mentions_in_comments_and_strings_do_not_tag():
    assert _tags("negative_mentions.cu") == ["naive"]


def test_lookalikes_do_not_tag():
    # per-warp partials written once to shared memory, `#pragma unroll 1`, a single array squared
    assert _tags("negative_lookalikes.cu") == ["naive"]


def test_inline_cuda_of_a_python_candidate_is_scanned():
    source = (
        "import torch\n# float4 in a Python comment must not count\n"
        'cuda_src = """\n__global__ void k(float* x) { atomicAdd(x, 1.0f); }\n"""\n'
    )
    assert strategy_tags(source, "python") == ["atomics"]


def test_tags_are_in_vocabulary_order():
    source = (FIXTURES / "fusion.cu").read_text() + (FIXTURES / "atomics.cu").read_text()
    tags = strategy_tags(source, "cuda")
    assert tags == [t for t in config.STRATEGY_TAGS if t in tags] and set(tags) <= set(config.STRATEGY_TAGS)


def test_tree_reduction_counts_as_staging_and_shuffle_unroll_pragma_does_not():
    source = """
    __global__ void r(const float* x, float* out) {
        __shared__ float s[256];
        s[threadIdx.x] = x[threadIdx.x];
        __syncthreads();
        for (int k = 128; k > 0; k >>= 1) { if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k]; __syncthreads(); }
        float v = s[0];
    #pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
        out[0] = v;
    }"""
    assert strategy_tags(source, "cuda") == ["shared_memory_tiling", "warp_shuffle"]


def test_cpu_manual_unrolling_and_ternary_relu_fusion():
    source = """
    for (; j + 4 <= m; j += 4) {
        c[j] += s * b[j]; c[j + 1] += s * b[j + 1]; c[j + 2] += s * b[j + 2]; c[j + 3] += s * b[j + 3];
    }
    for (int64_t i = 0; i < in; ++i) acc += row_x[i] * row_w[i];
    y[o] = acc > 0.0f ? acc : 0.0f;
    """
    assert strategy_tags(source, "cpp") == ["naive", "fusion", "loop_unrolling"]


def test_tags_match_the_strategies_the_synthetic_templates_were_written_with():
    from builder.embed.synthetic import synthetic_kernels

    kernels = synthetic_kernels(300, seed=3)
    mismatched = [k.name for k in kernels if set(strategy_tags(k.source, "cuda")) != set(k.strategies)]
    assert not mismatched, mismatched[:5]
    assert {tag for k in kernels for tag in k.strategies} == set(config.STRATEGY_TAGS)  # every tag exercised
