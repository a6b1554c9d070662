"""Search half of the query layer: full-text over code and names, semantic search over embeddings.

A mixin of `explorer.query.Archive` (same connection, cursors, result cache and error handling), split out
to keep each module readable.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from builder import config
from explorer.filters import Filters
from explorer.query_base import TABLE_COLUMNS, reads_parquet


class SearchMixin:
    # --- search -------------------------------------------------------------------------------
    @reads_parquet
    def search_text(
        self, text: str, filters: Filters = Filters(), limit: int = config.EXPLORER_SEARCH_RESULTS
    ) -> pd.DataFrame:
        """Case-insensitive substring match over op name, kernel name and code, ranked by where it matched."""
        where, params = filters.where()
        needle = text.strip()
        if not needle:
            return self.light_rows([])
        self._ensure_code_table()
        cols = ", ".join(f"k.{c}" for c in TABLE_COLUMNS)
        sql = (
            f"WITH hits AS (SELECT k.kernel_id, (CASE WHEN contains(lower(k.op_name), lower(?)) THEN 4 ELSE 0 END) + "
            f"(CASE WHEN contains(lower(k.kernel_name), lower(?)) THEN 2 ELSE 0 END) + "
            f"(CASE WHEN contains(c.code, lower(?)) THEN 1 ELSE 0 END) AS score "
            f"FROM kernels k JOIN code c USING (kernel_id)) "
            f"SELECT {cols}, h.score FROM hits h JOIN kernels k USING (kernel_id) "
            f"WHERE h.score > 0 AND {where} "
            f"ORDER BY h.score DESC, k.speedup_eager DESC NULLS LAST, k.kernel_id LIMIT {int(limit)}"
        )
        return self.df(sql, [needle, needle, needle, *params])

    def _ensure_code_table(self) -> None:
        """Lower-cased code in memory, built on the first full-text search: later searches skip Parquet decoding."""
        with self._lock:
            if self._code_loaded:
                return
            self.cursor().execute("CREATE TABLE code AS SELECT kernel_id, lower(cuda_code) AS code FROM records")
            self._code_loaded = True

    @reads_parquet
    def embeddings(self) -> tuple[np.ndarray, np.ndarray]:
        """(kernel_ids, unit-norm float32 matrix) of every kernel with an embedding; loaded once."""
        with self._lock:
            if self._embeddings is not None:
                return self._embeddings
        table = (
            self.cursor()
            .sql("SELECT kernel_id, embedding FROM records WHERE embedding IS NOT NULL AND len(embedding) > 0")
            .to_arrow_table()
        )
        ids = np.asarray(table.column("kernel_id").to_pylist(), dtype=object)
        if len(ids):
            column = table.column("embedding").combine_chunks()
            matrix = column.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
            matrix = matrix.reshape(len(ids), -1)
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            matrix = matrix / np.where(norms == 0, 1, norms)
        else:
            matrix = np.zeros((0, 0), np.float32)
        with self._lock:
            if self._embeddings is None:
                # Row positions in DuckDB, so a filtered search turns the filter into matrix rows in one query.
                positions = pd.DataFrame({"kernel_id": ids, "pos": np.arange(len(ids), dtype=np.int64)})
                cursor = self.cursor()
                cursor.register("embedding_positions_frame", positions)
                cursor.execute("CREATE OR REPLACE TABLE embedding_positions AS SELECT * FROM embedding_positions_frame")
                cursor.unregister("embedding_positions_frame")
                self._embeddings = (ids, matrix)
        return self._embeddings

    def nearest(
        self,
        vector: np.ndarray,
        filters: Filters = Filters(),
        limit: int = config.EXPLORER_SEARCH_RESULTS,
        exclude: str | None = None,
    ) -> pd.DataFrame:
        """Kernels by cosine similarity to `vector`, restricted to the filters."""
        ids, matrix = self.embeddings()
        if matrix.size == 0 or vector.shape[-1] != matrix.shape[1]:
            return self.light_rows([]).assign(similarity=pd.Series(dtype=float))
        scores = matrix @ (vector.astype(np.float32) / (np.linalg.norm(vector) or 1.0))
        if not filters.is_empty():
            where, params = filters.where()
            allowed = self.df(
                f"SELECT e.pos FROM embedding_positions e JOIN kernels USING (kernel_id) WHERE {where}", params
            )["pos"].to_numpy()
            mask = np.zeros(len(ids), dtype=bool)
            mask[allowed] = True
            scores = np.where(mask, scores, -np.inf)
        if exclude is not None:
            scores = np.where(ids == exclude, -np.inf, scores)
        k = min(limit, len(ids))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        top = top[np.isfinite(scores[top])]
        rows = self.light_rows(list(ids[top]))
        similarity = dict(zip(ids[top], scores[top].astype(float), strict=True))
        return rows.assign(similarity=rows["kernel_id"].map(similarity))

    def neighbours(self, kernel_id: str, limit: int = config.EXPLORER_NEIGHBOURS) -> pd.DataFrame:
        ids, matrix = self.embeddings()
        hits = np.flatnonzero(ids == kernel_id)
        if not len(hits):
            return self.light_rows([]).assign(similarity=pd.Series(dtype=float))
        return self.nearest(matrix[hits[0]], limit=limit, exclude=kernel_id)
