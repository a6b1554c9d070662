"""The query layer against a hand-made archive whose right answers are worked out in the comments."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from builder.errors import UsageError
from explorer.filters import Filters
from explorer.query import Archive
from explorer.sources import resolve_source
from tests.explorer.archive_factory import make_record, write_archive

WARP_CODE = "__global__ void g_kernel(float* x) { float v = __shfl_down_sync(0xffffffff, x[0], 1); }\n"


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    # speedup_eager = eager/runtime. Task 1/1: a 2.0x (best eligible), b 20x but flagged, c incorrect, d 0.5x.
    # Task 1/2: e 0.5x, f compile error. Task 2/1: g 4x, child of a.
    a = make_record(
        "1/1",
        "a",
        model="m1",
        runtime_ms=1.0,
        eager_ms=2.0,
        compile_ms=1.0,
        embedding=[1, 0, 0],
        map_x=0.0,
        map_y=0.0,
        cluster_id=0,
        cluster_label="alpha",
        strategy_tags=["naive"],
    )
    records = [
        a,
        make_record(
            "1/1", "b", model="m1", runtime_ms=0.1, eager_ms=2.0, flags=["suspicious_speedup"], embedding=[0.9, 0.1, 0]
        ),
        make_record("1/1", "c", model="m2", status="incorrect", embedding=[0, 1, 0]),
        make_record("1/1", "d", model="m2", runtime_ms=4.0, eager_ms=2.0, embedding=[0, 0, 1]),
        make_record(
            "1/2",
            "e",
            model="m1",
            runtime_ms=1.0,
            eager_ms=0.5,
            embedding=[0.7, 0.7, 0],
            strategy_tags=["warp_shuffle", "fusion"],
        ),
        make_record("1/2", "f", model="m2", status="compile_error", error="identifier undefined"),
        make_record(
            "2/1",
            "g",
            code=WARP_CODE,
            model="m2",
            runtime_ms=0.25,
            eager_ms=1.0,
            embedding=[1, 0.05, 0],
            parent_ids=[a["kernel_id"]],
            round=1,
            op_name="warp_reduce",
        ),
    ]
    archive = Archive(resolve_source(str(write_archive(tmp_path_factory.mktemp("known"), records))))
    return archive, {r["kernel_name"]: r["kernel_id"] for r in records}


def names(archive, frame):
    return list(frame["kernel_name"])


def test_best_per_task_skips_flagged_faster_kernel(known):
    archive, _ids = known
    best = archive.best_per_task()
    assert names(archive, best) == ["g", "a", "e"]  # sorted by eager speedup, descending
    assert list(best["n_eligible"]) == [1, 2, 1]
    assert names(archive, archive.best_per_task(sort="task_id", descending=False)) == ["a", "e", "g"]


def test_filters_change_results(known):
    archive, _ids = known
    assert names(archive, archive.best_per_task(Filters(level=("1",)))) == ["a", "e"]
    assert names(archive, archive.best_per_task(Filters(model=("m2",)))) == ["g", "d"]
    assert names(
        archive, archive.kernels(Filters(status=("compile_error", "incorrect")), sort="kernel_name", descending=False)
    ) == ["c", "f"]
    assert names(archive, archive.kernels(Filters(flag=("suspicious_speedup",)))) == ["b"]
    assert set(names(archive, archive.kernels(Filters(flag=("none",))))) == {"a", "c", "d", "e", "f", "g"}
    assert names(archive, archive.kernels(Filters(tag=("fusion",)))) == ["e"]
    assert names(archive, archive.kernels(Filters(min_speedup=3.0))) == ["b", "g"]
    assert archive.count(Filters(task=("1/1",))) == 4


def test_fast_p_curve(known):
    archive, _ids = known
    curve = archive.fast_p_curve("eager").set_index("p")["fast_p"]
    # best eligible per task: 1/1 -> 2.0, 1/2 -> 0.5, 2/1 -> 4.0
    assert curve.loc[0.0] == pytest.approx(1.0)
    assert curve.loc[1.0] == pytest.approx(2 / 3)
    assert curve.loc[3.0] == pytest.approx(1 / 3)
    assert curve.loc[5.0] == pytest.approx(0.0)
    with pytest.raises(UsageError):
        archive.fast_p_curve("fastest")


def test_per_model_aggregates(known):
    archive, _ids = known
    table = archive.by_model(group=("model",)).set_index("model")
    # m1: a, b, e -> all correct, 2 eligible; best per task 2.0 and 0.5 -> fast_1 1/2, geomean 1.0
    assert table.loc["m1", "kernels"] == 3
    assert table.loc["m1", "correct_rate"] == pytest.approx(1.0)
    assert table.loc["m1", "eligible_rate"] == pytest.approx(2 / 3)
    assert table.loc["m1", "fast_1"] == pytest.approx(0.5)
    assert table.loc["m1", "geomean_speedup"] == pytest.approx(1.0)
    # m2: c, d, f, g over three tasks; best 0.5 (1/1), none (1/2), 4.0 (2/1) -> fast_1 1/3, geomean sqrt(2)
    assert table.loc["m2", "fast_1"] == pytest.approx(1 / 3)
    assert table.loc["m2", "geomean_speedup"] == pytest.approx(np.sqrt(2.0))
    assert table.loc["m2", "correct_rate"] == pytest.approx(0.5)


def test_kernel_task_lineage(known):
    archive, ids = known
    record = archive.kernel(ids["g"])
    assert record["cuda_code"] == WARP_CODE and record["parent_ids"] == [ids["a"]] and record["flags"] == []
    assert archive.kernel("does-not-exist") is None
    assert names(archive, archive.children(ids["a"])) == ["g"]
    assert archive.children(ids["g"]).empty
    task = archive.task("1/1")
    assert task["kernels"] == 4 and task["op_name"] == "op1_1"
    assert archive.task("9/9") is None
    assert set(names(archive, archive.task_kernels("1/2"))) == {"e", "f"}


def test_text_search_matches_code_and_names_with_filters(known):
    archive, _ids = known
    assert names(archive, archive.search_text("SHFL_down")) == ["g"]  # case-insensitive, in the code
    assert names(archive, archive.search_text("warp_reduce")) == ["g"]  # op name
    assert archive.search_text("shfl", Filters(level=("1",))).empty
    assert archive.search_text("   ").empty
    assert archive.search_text("%'; DROP TABLE kernels; --").empty  # a parameter, never SQL
    assert archive.size == 7


def test_semantic_nearest_and_neighbours(known):
    archive, ids = known
    assert names(archive, archive.nearest(np.array([1.0, 0, 0]), limit=3)) == ["a", "g", "b"]
    assert names(archive, archive.nearest(np.array([1.0, 0, 0]), Filters(level=("1",)), limit=2)) == ["a", "b"]
    neighbours = archive.neighbours(ids["a"], limit=2)
    assert names(archive, neighbours) == ["g", "b"]
    assert neighbours["similarity"].iloc[0] > neighbours["similarity"].iloc[1]
    assert archive.neighbours(ids["f"]).empty  # no embedding
    assert archive.nearest(np.ones(5)).empty  # wrong dimension: nothing, not an error


def test_unknown_columns_are_rejected(known):
    archive, _ids = known
    for bad in ("kernel_id; DROP TABLE kernels", "cuda_code", "nope"):
        with pytest.raises(UsageError):
            archive.kernels(sort=bad)
    with pytest.raises(UsageError):
        archive.options("embedding")


def test_results_are_cached(known):
    archive, _ids = known
    first = archive.best_per_task(Filters(level=("1",)))
    assert archive.best_per_task(Filters(level=("1",))) is first


def test_a_result_asked_for_while_it_is_computed_is_computed_once(known):
    archive, _ids = known
    started, release, calls = threading.Event(), threading.Event(), []

    def slow():
        calls.append(1)
        started.set()
        release.wait(30)
        return "result"

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(archive._cached, ("test-key",), slow)
        started.wait(30)
        second = pool.submit(archive._cached, ("test-key",), slow)
        time.sleep(0.2)
        assert not second.done()  # waits for the computation under way rather than starting its own
        release.set()
        assert first.result(30) == second.result(30) == "result"
    assert calls == [1]


def test_a_failed_computation_reaches_its_waiters_and_is_not_cached(known):
    archive, _ids = known

    def broken():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        archive._cached(("broken-key",), broken)
    assert archive._cached(("broken-key",), lambda: "fixed") == "fixed"


def test_overview_holds_what_the_page_shows(known):
    archive, _ids = known
    overview = archive.overview()
    assert overview.totals["kernels"] == archive.size
    assert set(overview.speedups) == set(overview.fast_p) == {"eager", "compile"}
    assert overview.counts_by_level["kernels"].sum() == overview.counts_by_model["kernels"].sum() == archive.size
    assert list(overview.top["speedup_eager"]) == sorted(overview.top["speedup_eager"], reverse=True)


def test_map_and_options(known, synthetic_archive):
    archive, _ids = known
    assert list(archive.map_points("status")["kernel_name"]) == ["a"]  # only a has coordinates
    assert archive.options("model") == ["m1", "m2"]
    assert archive.options("strategy_tags") == ["fusion", "naive", "warp_shuffle"]
    centres = synthetic_archive.cluster_centres()
    assert len(centres) >= 5 and centres["label"].str.len().min() > 0


def test_missing_optional_columns_read_as_null(tmp_path):
    # An export from an older schema without the embedding columns still opens.
    folder = write_archive(
        tmp_path,
        [make_record("1/1", "a", runtime_ms=1.0, eager_ms=2.0)],
        drop_columns=("embedding", "map_x", "map_y", "cluster_id", "cluster_label"),
    )
    archive = Archive(resolve_source(str(folder)))
    assert archive.map_points("status").empty
    assert archive.embedding_model() is None
    assert names(archive, archive.best_per_task()) == ["a"]


def test_tasks_in_numeric_order_with_their_names(tmp_path):
    records = [make_record(t, f"k{t}", op_name=f"op {t}", runtime_ms=1.0, eager_ms=2.0) for t in ("1/10", "1/2", "2/1")]
    archive = Archive(resolve_source(str(write_archive(tmp_path, records))))
    assert archive.task_names() == {"1/2": "op 1/2", "1/10": "op 1/10", "2/1": "op 2/1"}
    assert archive.options("task_id") == ["1/2", "1/10", "2/1"]
    ordered = archive.best_per_task(sort="task_id", descending=False)
    assert list(ordered["task_id"]) == ["1/2", "1/10", "2/1"]
    assert list(archive.kernels(sort="task_id", descending=True)["task_id"]) == ["2/1", "1/10", "1/2"]


def test_floor_and_speed_of_light_read_when_the_archive_has_them(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    plain = Archive(resolve_source(str(write_archive(tmp_path / "plain", [make_record("1/1", "a", runtime_ms=1.0)]))))
    assert (
        not plain.has_values("speed_of_light")
        and plain.kernel(plain.best_per_task()["kernel_id"][0])["floor_ms"] is None
    )

    folder = write_archive(tmp_path / "floors", [make_record("1/1", "a", runtime_ms=2.0, eager_ms=4.0)])
    path = next((folder / "data").glob("*.parquet"))
    table = pq.read_table(path)
    for name, value in (("floor_ms", 0.5), ("speed_of_light", 0.25)):  # in the record schema or not (yet)
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, pa.array([value]))
        else:
            table = table.append_column(name, pa.array([value]))
    pq.write_table(table, path)
    archive = Archive(resolve_source(str(folder)))
    assert archive.has_values("speed_of_light")
    best = archive.best_per_task()
    assert (best["floor_ms"][0], best["speed_of_light"][0]) == (0.5, 0.25)
    assert archive.kernel(best["kernel_id"][0])["speed_of_light"] == 0.25
