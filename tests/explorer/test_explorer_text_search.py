"""Full-text search: every word in any order across names, tags and code, BM25 ranking, exact phrases, and
every match counted (no cap)."""

from __future__ import annotations

import pytest

from explorer import text_query
from explorer.filters import Filters
from explorer.query import Archive
from explorer.sources import resolve_source
from tests.explorer.archive_factory import make_record, write_archive

TILED = """// Tiled matmul: each block stages A and B tiles in shared memory.
__global__ void tiledMatmul(const float* a, const float* b, float* c, int n) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
}
"""
# The same words, never side by side as "shared memory", and much longer: ranked below TILED.
SCATTERED = (
    "// memory is read once; tiles are shared between warps\n__global__ void k(float* x) {}\n" + "// padding\n" * 200
)
WARP = "__global__ void softmax_rows(float* x) { float m = warpReduceMax(x[0]); m = __shfl_down_sync(~0u, m, 16); }\n"
FUSED = "// conv then relu in one pass\n__global__ void conv_relu(float* y) {}\n"


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    records = [
        make_record("1/1", "tiled_v1", code=TILED, op_name="square_matmul", strategy_tags=["shared_memory_tiling"]),
        make_record("1/1", "scattered_v2", code=SCATTERED, op_name="square_matmul"),
        make_record("1/23", "softmax_warp", code=WARP, op_name="softmax", strategy_tags=["warp_shuffle"]),
        make_record("2/4", "fused", code=FUSED, op_name="conv2d_relu_fused"),
    ]
    # Many kernels containing float4: more than any page or the old cap of 50.
    records += [
        make_record("1/2", f"vec_{i}", code=f"__global__ void v{i}(float4* x) {{ /* {i} */ }}\n") for i in range(70)
    ]
    return Archive(resolve_source(str(write_archive(tmp_path_factory.mktemp("text"), records))))


def names(frame):
    return list(frame["kernel_name"])


def test_every_word_in_any_order_across_names_tags_and_code(archive):
    # "tiling" finds "Tiled" and "tiles" (one stem); "matmul" is in the op name; "shared memory" in the code.
    assert names(archive.search_text("shared memory tiling matmul")) == ["tiled_v1", "scattered_v2"]
    assert names(archive.search_text("matmul tiling memory shared")) == ["tiled_v1", "scattered_v2"]
    # camelCase and snake_case split into words: warpReduceMax holds "reduce", softmax is the task's name
    assert names(archive.search_text("softmax warp reduction")) == ["softmax_warp"]
    assert names(archive.search_text("fused conv relu")) == ["fused"]
    assert names(archive.search_text("softmax using a warp shuffle")) == ["softmax_warp"]  # stop words left out
    assert archive.search_text("softmax matmul").empty  # all words must match


def test_quoted_phrases_match_exactly(archive):
    assert names(archive.search_text('"shared memory"')) == ["tiled_v1"]
    assert names(archive.search_text('"__shfl_down_sync"')) == ["softmax_warp"]
    assert archive.search_text('"memory shared"').empty
    assert names(archive.search_text('"shared memory" matmul')) == ["tiled_v1"]


def test_ranked_by_bm25_and_every_match_counted(archive):
    hits = archive.search_text("float4")
    assert len(hits) == 70  # not capped at a page or at 50
    assert hits["score"].is_monotonic_decreasing
    # Both hold each word; the short kernel that names its strategy ranks first, by a clear margin.
    tiled, scattered = archive.search_text("shared memory")["score"].tolist()
    assert tiled > 1.5 * scattered > 0
    assert len(archive.search_text("float4", limit=10)) == 10
    assert names(archive.search_text("float4", Filters(task=("1/1",)))) == []


def test_hostile_and_empty_queries(archive):
    assert archive.search_text('  "" ').empty
    assert archive.search_text("%'; DROP TABLE kernels; --").empty  # parameters, never SQL
    assert archive.search_text("x" * 10_000).empty
    assert archive.size == 74


def test_query_parsing():
    query = text_query.parse('Shared memory TILING "Warp Shuffle" for the matmul')
    assert query.phrases == ("warp shuffle",)
    assert query.words == ("shar", "memory", "til", "matmul", "warp", "shuffl")
    assert text_query.parse("the for").words == ("the", "for")  # only stop words: they are the query
    assert text_query.split_words("tiledMatmul __shfl_down_sync float4") == [
        "tiled",
        "matmul",
        "shfl",
        "down",
        "sync",
        "float4",
    ]
    assert [text_query.stem(w) for w in ("tiles", "tile", "tiling", "class", "relu", "uses", "max")] == [
        "til",
        "til",
        "til",
        "class",
        "relu",
        "use",
        "max",
    ]
