"""Search half of the query layer: full-text over code and names, semantic search over embeddings.

A mixin of `explorer.query.Archive` (same connection, cursors, result cache and error handling), split out
to keep each module readable.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from builder import config
from explorer import text_index, text_query
from explorer.filters import Filters
from explorer.query_base import TABLE_COLUMNS, reads_parquet


class SearchMixin:
    # --- search -------------------------------------------------------------------------------
    @reads_parquet
    def search_text(self, text: str, filters: Filters = Filters(), limit: int | None = None) -> pd.DataFrame:
        """Every kernel matching all the words (any order, any field) and quoted phrases of `text`, best BM25
        score first (explorer/text_query.py); `limit` caps the rows, the default is all of them."""
        query = text_query.parse(text)
        if query.is_empty():
            return self.light_rows([]).assign(score=pd.Series(dtype=float))
        self.ensure_search_index()
        n = self.size
        frequencies = {}
        for word in query.words:  # kernels holding each word (cached per word: a later query reuses it)
            match, params = text_query.match_sql(word)
            frequencies[word] = self.scalar(f"SELECT count(*) FROM search_docs WHERE {match}", params)
        words = tuple(sorted(query.words, key=lambda w: frequencies[w]))  # the rarest word narrows first
        query = text_query.TextQuery(words, query.phrases)
        idf = [float(np.log(1 + (n - frequencies[w] + 0.5) / (frequencies[w] + 0.5))) for w in words]
        avg_length = float(self.scalar("SELECT avg(length(code)) FROM search_docs") or 1.0) or 1.0
        ranked, params = text_query.ranking_sql(query, idf, avg_length)
        where, filter_params = filters.where()
        cols = ", ".join(f"k.{c}" for c in TABLE_COLUMNS)
        limit_sql = f" LIMIT {int(limit)}" if limit else ""
        sql = (
            f"WITH hits AS ({ranked}) SELECT {cols}, h.score FROM hits h JOIN kernels k USING (kernel_id) "
            f"WHERE {where} ORDER BY h.score DESC, k.speedup_eager DESC NULLS LAST, k.kernel_id{limit_sql}"
        )
        return self.df(sql, [*params, *filter_params])

    def ensure_search_index(self) -> None:
        """The words and lower-cased text of every kernel in memory, built once (the first full-text search or
        the background warm-up): searches never decode Parquet."""
        with self._index_lock:
            if self._code_loaded:
                return
            text_index.build(self._con)
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
