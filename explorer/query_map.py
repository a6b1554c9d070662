"""The map half of the query layer: points to draw (all, or a fixed per-colour sample) and the kernels inside a
box or lasso shape drawn on the map, drawn points or not."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from builder import config
from builder.errors import UsageError
from explorer.filters import Filters
from explorer.query_base import SORTABLE, TABLE_COLUMNS

_HAS_POINT = "map_x IS NOT NULL AND map_y IS NOT NULL"
# What a drawn point carries besides its colour: position, cluster, and what its hover text shows.
MAP_POINT_COLUMNS = (
    "kernel_id",
    "map_x",
    "map_y",
    "cluster_id",
    "cluster_label",
    "kernel_name",
    "task_id",
    "op_name",
    "status",
    "speedup_eager",
)


class MapMixin:
    def map_total(self, filters: Filters = Filters()) -> int:
        where, params = filters.where()
        return int(self.scalar(f"SELECT count(*) FROM kernels WHERE {_HAS_POINT} AND {where}", params))

    def map_points(self, colour: str, filters: Filters = Filters(), limit: int | None = None) -> pd.DataFrame:
        """Points ordered by kernel_id, coloured by `colour`. With `limit` below the number of points, a sample:
        every colour value keeps the same share (at least EXPLORER_MAP_MIN_PER_GROUP points, or all it has), so
        small groups stay visible. kernel_id is a content hash, so "first by kernel_id" is a fixed pseudo-random
        choice: the same kernels are drawn on every reload and a larger limit draws a superset."""
        if colour not in SORTABLE:
            raise UsageError(f"cannot colour by {colour!r}")
        where, params = filters.where()
        columns = ", ".join(dict.fromkeys([*MAP_POINT_COLUMNS, colour]))
        total = self.map_total(filters)
        if limit is None or total <= limit:
            return self.df(f"SELECT {columns} FROM kernels WHERE {_HAS_POINT} AND {where} ORDER BY kernel_id", params)
        # A continuous colour has no groups to keep: one group, an even sample.
        group = {"strategy_tags": "strategy_tags[1]", "speedup_eager": "NULL", "speedup_compile": "NULL"}
        group_sql = group.get(colour, colour)
        return self.df(
            f"SELECT {columns} FROM ("
            f"  SELECT {columns}, row_number() OVER (PARTITION BY {group_sql} ORDER BY kernel_id) AS rank_in_group,"
            f"         count(*) OVER (PARTITION BY {group_sql}) AS group_size"
            f"  FROM kernels WHERE {_HAS_POINT} AND {where})"
            " WHERE rank_in_group <= greatest(least(group_size, ?), floor(group_size * ?))"
            " ORDER BY kernel_id",
            [*params, config.EXPLORER_MAP_MIN_PER_GROUP, limit / total],
        )

    def map_density(
        self, filters: Filters = Filters(), bins: int = config.EXPLORER_MAP_DENSITY_BINS
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Kernel counts on a bins x bins grid over every point under the filters: (counts[x, y], x edges, y edges).
        A sampled map shades this beneath the drawn points, so no part of the archive goes missing from view."""
        where, params = filters.where()
        xy = self.df(f"SELECT map_x, map_y FROM kernels WHERE {_HAS_POINT} AND {where}", params)
        counts, x_edges, y_edges = np.histogram2d(xy["map_x"].to_numpy(float), xy["map_y"].to_numpy(float), bins=bins)
        return counts, x_edges, y_edges

    def map_region(
        self,
        shapes: Sequence[tuple[Sequence[float], Sequence[float]]],
        filters: Filters = Filters(),
        limit: int | None = None,
    ) -> tuple[int, pd.DataFrame]:
        """Kernels whose map point lies inside any of the polygons (xs, ys) (a box is its 4 corners), under the
        filters: (how many, them as table rows, the first `limit` when given: ranking-eligible first, then by
        speedup)."""
        polygons = [(np.asarray(xs, float), np.asarray(ys, float)) for xs, ys in shapes]
        polygons = [(xs, ys) for xs, ys in polygons if len(xs) >= 3 and len(xs) == len(ys)]
        if not polygons:
            return 0, self.light_rows([])
        all_x = np.concatenate([xs for xs, _ in polygons])
        all_y = np.concatenate([ys for _, ys in polygons])
        where, params = filters.where()
        candidates = self.df(  # the shapes' bounding box first: DuckDB narrows, numpy decides the edges
            f"SELECT kernel_id, map_x, map_y FROM kernels WHERE {_HAS_POINT} AND {where}"
            " AND map_x BETWEEN ? AND ? AND map_y BETWEEN ? AND ?",
            [*params, all_x.min(), all_x.max(), all_y.min(), all_y.max()],
        )
        px, py = candidates["map_x"].to_numpy(float), candidates["map_y"].to_numpy(float)
        mask = np.zeros(len(candidates), dtype=bool)
        for xs, ys in polygons:
            mask |= points_in_polygon(px, py, xs, ys)
        ids = candidates["kernel_id"][mask].tolist()
        # Not through the result cache: the key would hold every selected id.
        rows = (
            self.cursor()
            .execute(
                f"SELECT {', '.join(TABLE_COLUMNS)} FROM kernels WHERE kernel_id IN (SELECT unnest(?::VARCHAR[]))"
                " ORDER BY ranking_eligible DESC, speedup_eager DESC NULLS LAST, kernel_id LIMIT ?",
                [ids, len(ids) if limit is None else limit],
            )
            .df()
        )
        return len(ids), rows

    def cluster_centres(self) -> pd.DataFrame:
        return self.df(
            "SELECT cluster_id, mode(cluster_label) AS label, median(map_x) AS x, median(map_y) AS y, count(*) AS n "
            f"FROM kernels WHERE cluster_id IS NOT NULL AND cluster_id >= 0 AND {_HAS_POINT} "
            "GROUP BY cluster_id ORDER BY cluster_id"
        )


def points_in_polygon(px: np.ndarray, py: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Even-odd rule: a point is inside when a ray to its right crosses the polygon's edges an odd number of
    times. The polygon is closed implicitly (last vertex joins the first); works for concave lasso shapes."""
    inside = np.zeros(len(px), dtype=bool)
    x1, y1 = np.roll(xs, -1), np.roll(ys, -1)
    for ax, ay, bx, by in zip(xs, ys, x1, y1, strict=True):
        straddles = (ay > py) != (by > py)
        with np.errstate(divide="ignore", invalid="ignore"):
            crossing_x = ax + (py - ay) * (bx - ax) / (by - ay)
        inside ^= straddles & (px < crossing_x)
    return inside
