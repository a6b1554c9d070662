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


def test_staging_through_derived_pointers_and_extern_shared_aliases():
    # the global side is a row pointer derived from a parameter; the shared side a pointer into extern smem
    source = """
    __global__ void k(const float* q, float* out, int d) {
        extern __shared__ float smem[];
        float* qs = smem + 32;
        const float* qr = q + blockIdx.x * d;
        for (int t = threadIdx.x; t < d; t += blockDim.x) qs[t] = qr[t];
        __syncthreads();
        out[blockIdx.x] = qs[0];
    }"""
    assert strategy_tags(source, "cuda") == ["shared_memory_tiling"]


def test_a_value_computed_from_global_memory_and_cached_in_shared_is_staged():
    source = """
    __global__ void k(const float* x, const float* r, float* y, int cols) {
        extern __shared__ float row[];
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {
            const float v = x[c] + r[c];
            row[c] = v;
        }
        __syncthreads();
        y[threadIdx.x] = row[cols - 1 - threadIdx.x];
    }"""
    assert "shared_memory_tiling" in strategy_tags(source, "cuda")


def test_a_tile_without_its_barrier_is_still_tiling():
    # the missing __syncthreads is the kernel's bug, not a different strategy
    source = """
    __global__ void k(const float* x, float* y) {
        __shared__ float tile[10][34];
        const float* xp = x + blockIdx.z * 1024;
        for (int i = threadIdx.x; i < 340; i += 256) tile[i / 34][i % 34] = xp[i];
        y[threadIdx.x] = tile[threadIdx.y][threadIdx.x] + tile[threadIdx.y + 1][threadIdx.x];
    }"""
    assert strategy_tags(source, "cuda") == ["shared_memory_tiling"]


def test_per_thread_partials_merged_once_are_not_tiling():
    source = """
    __global__ void k(const float* x, long* y, long d1) {
        __shared__ float best[8][32];
        float bv = -INFINITY;
        for (long i = threadIdx.y; i < d1; i += 8) bv = fmaxf(bv, x[i]);
        best[threadIdx.y][threadIdx.x] = bv;
        __syncthreads();
        if (threadIdx.y == 0) y[threadIdx.x] = best[1][threadIdx.x] > bv;
    }"""
    assert strategy_tags(source, "cuda") == ["naive"]


def test_race_in_an_in_place_scan_is_still_staged_scan_code():
    source = """
    __global__ void scan(const float* x, float* y, int cols) {
        __shared__ float s[4096];
        for (int offset = 1; offset < cols; offset <<= 1) {
            for (int c = cols - 1 - threadIdx.x; c >= offset; c -= blockDim.x) s[c] += s[c - offset];
            __syncthreads();
        }
        y[threadIdx.x] = s[threadIdx.x];
    }"""
    assert strategy_tags(source, "cuda") == ["shared_memory_tiling"]


def test_manual_unrolling_with_offsets_scaled_by_a_stride():
    source = """
    __global__ void k(const float* base, float* y, long d1, long d2) {
        float m0 = -INFINITY, m1 = -INFINITY, m2 = -INFINITY, m3 = -INFINITY;
        long i = 0;
        for (; i + 4 <= d1; i += 4) {
            m0 = fmaxf(m0, base[i * d2]);
            m1 = fmaxf(m1, base[(i + 1) * d2]);
            m2 = fmaxf(m2, base[(i + 2) * d2]);
            m3 = fmaxf(m3, base[(i + 3) * d2]);
        }
        y[0] = fmaxf(fmaxf(m0, m1), fmaxf(m2, m3));
    }"""
    assert strategy_tags(source, "cuda") == ["naive", "loop_unrolling"]
