"""Map queries: the drawn sample (per-colour shares, fixed, nested) and the kernels inside box/lasso shapes."""

from __future__ import annotations

import numpy as np
import pytest

from builder import config
from builder.errors import UsageError
from explorer.filters import Filters
from explorer.query import Archive
from explorer.query_map import points_in_polygon
from explorer.sources import resolve_source
from tests.explorer.archive_factory import make_record, write_archive

STATUS_SIZES = {"correct": 900, "incorrect": 90, "timeout": 10}


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> Archive:
    """1000 kernels on a 40 x 25 integer grid (x = i % 40, y = i // 40), statuses of very unequal sizes, level 1
    for even i and level 2 for odd i, speedup_eager = 1 + i / 1000."""
    statuses = [status for status, size in STATUS_SIZES.items() for _ in range(size)]
    records = []
    for i, status in enumerate(statuses):
        timed = status == "correct"
        records.append(
            make_record(
                f"{1 + i % 2}/1",
                f"k{i:04d}",
                status=status,
                map_x=float(i % 40),
                map_y=float(i // 40),
                cluster_id=i % 3,
                cluster_label=f"c{i % 3}",
                runtime_ms=1.0 if timed else None,
                eager_ms=1.0 + i / 1000 if timed else None,
            )
        )
    return Archive(resolve_source(str(write_archive(tmp_path_factory.mktemp("grid"), records))))


def test_small_map_is_drawn_whole(grid):
    assert grid.map_total() == 1000
    points = grid.map_points("status", limit=1000)
    assert len(points) == 1000
    assert list(points["kernel_id"]) == sorted(points["kernel_id"])  # selections map back by row number


def test_sample_keeps_every_colour_share_and_small_groups(grid, monkeypatch):
    monkeypatch.setattr(config, "EXPLORER_MAP_MIN_PER_GROUP", 20)
    sample = grid.map_points("status", limit=100)
    # 10% of each status, but never fewer than 20 (or all) of a status: 90 + 20 + 10.
    assert sample["status"].value_counts().to_dict() == {"correct": 90, "incorrect": 20, "timeout": 10}
    assert list(sample["kernel_id"]) == sorted(sample["kernel_id"])


def test_sample_is_fixed_and_nested(grid, monkeypatch):
    monkeypatch.setattr(config, "EXPLORER_MAP_MIN_PER_GROUP", 5)
    first = grid.map_points("cluster_label", limit=300)
    grid._cache.clear()
    again = grid.map_points("cluster_label", limit=300)
    larger = grid.map_points("cluster_label", limit=600)
    assert list(first["kernel_id"]) == list(again["kernel_id"])  # the same points on every reload
    assert set(first["kernel_id"]) < set(larger["kernel_id"])  # drawing more adds points, never swaps them
    assert 290 <= len(first) <= 300


def test_sample_under_filters_and_continuous_colour(grid, monkeypatch):
    monkeypatch.setattr(config, "EXPLORER_MAP_MIN_PER_GROUP", 5)
    level_two = Filters(level=("2",))
    assert grid.map_total(level_two) == 500
    sample = grid.map_points("speedup_eager", level_two, limit=50)
    assert len(sample) == 50  # a colour scale has no groups: an even sample of the filtered points
    assert set(grid.map_points("level", level_two, limit=50)["level"]) == {2}


def test_unknown_colour_is_a_usage_error(grid):
    with pytest.raises(UsageError):
        grid.map_points("no_such_column; DROP TABLE kernels")


def test_box_region_counts_every_kernel_inside(grid):
    # x in [9.5, 19.5] and y in [0.5, 4.5]: columns 10..19 of rows 1..4 = 40 kernels.
    count, rows = grid.map_region([([9.5, 19.5, 19.5, 9.5], [0.5, 0.5, 4.5, 4.5])], limit=7)
    assert count == 40
    assert len(rows) == 7
    names = set(rows["kernel_name"])
    inside = {f"k{y * 40 + x:04d}" for x in range(10, 20) for y in range(1, 5)}
    assert names <= inside
    # Eligible (correct) kernels first, fastest vs eager first: the highest indices of the box.
    assert list(rows["kernel_name"]) == sorted(inside, reverse=True)[:7]


def test_concave_lasso_excludes_its_notch(grid):
    # An L: the square [-0.5, 9.5]^2 minus its upper-right quarter (4.5, 9.5]^2.
    xs = [-0.5, 9.5, 9.5, 4.5, 4.5, -0.5]
    ys = [-0.5, -0.5, 4.5, 4.5, 9.5, 9.5]
    count, rows = grid.map_region([(xs, ys)], limit=1000)
    expected = {f"k{y * 40 + x:04d}" for x in range(10) for y in range(10) if not (x >= 5 and y >= 5)}
    assert count == 75 and set(rows["kernel_name"]) == expected


def test_region_union_filters_and_degenerate_shapes(grid):
    left = ([-0.5, 0.5, 0.5, -0.5], [-0.5, -0.5, 24.5, 24.5])  # column x = 0: 25 kernels, all even i
    right = ([38.5, 39.5, 39.5, 38.5], [-0.5, -0.5, 24.5, 24.5])  # column x = 39: 25 kernels, all odd i
    assert grid.map_region([left, right])[0] == 50
    count, rows = grid.map_region([([-1.0, 40.0, 40.0, -1.0], [-1.0, -1.0, 25.0, 25.0])])
    assert count == len(rows) == grid.map_total()  # without a limit, every kernel inside is a row (tables page)
    assert grid.map_region([left, right], Filters(level=("2",)))[0] == 25
    count, rows = grid.map_region([([0, 1], [0, 1]), ([5.0] * 4, [5.0] * 4)])
    assert count == 0 and rows.empty


def test_points_in_polygon_matches_a_triangle_by_hand():
    xs, ys = np.array([0.0, 4.0, 0.0]), np.array([0.0, 0.0, 4.0])  # x >= 0, y >= 0, x + y <= 4
    px = np.array([1.0, 3.0, -1.0, 1.9, 2.1])
    py = np.array([1.0, 3.0, 1.0, 2.0, 2.0])
    assert points_in_polygon(px, py, xs, ys).tolist() == [True, False, False, True, False]


def test_density_counts_every_point_under_the_filters(grid):
    counts, x_edges, y_edges = grid.map_density(bins=8)
    assert counts.shape == (8, 8) and counts.sum() == 1000
    assert x_edges[0] == 0 and x_edges[-1] == 39 and y_edges[-1] == 24
    counts, _, _ = grid.map_density(Filters(level=("2",)), bins=4)
    assert counts.sum() == 500
    # Level 2 is the odd columns 1..39: the first of 4 bins, x in [1, 10.5), holds columns 1, 3, 5, 7 and 9.
    assert counts[0].sum() == 5 * 25
