"""The full-text index of an archive: built once, in memory, as the DuckDB table `search_docs`.

One row per kernel:
  names      op name, task id, kernel name, tags, cluster label: lower-cased words between spaces
  names_raw  the same fields, lower-cased as written (quoted phrases)
  words      the distinct words of the code, camelCase identifiers also split (`warpReduceMax` -> warpreducemax
             warp reduce max), between spaces: a third of the code's size, so a query word is a short scan
  code       the code lower-cased, every other ASCII character a space (how often a word occurs, for BM25)
  raw        the code lower-cased as written (quoted phrases)

The code is rewritten byte for byte with `bytes.translate` over the Arrow column's one data buffer, which keeps
its offsets (UTF-8 bytes above 127 are left alone): DuckDB's regular expressions over 100k kernels' code cost
7-9 s of CPU, translate() 4 s; this is a fraction of a second. The distinct words take a pass in Python over each
kernel's tokens (a few seconds at 100k, in the background warm-up); camelCase parts are worked out once per
distinct identifier of the archive, not per occurrence.
"""

from __future__ import annotations

import re

import duckdb
import numpy as np
import pyarrow as pa

_ALNUM = {c for c in range(128) if chr(c).isalnum()}
# A-Z -> a-z, other ASCII non-alphanumerics -> space; bytes >= 128 (inside UTF-8 characters) unchanged.
LOWER_WORDS = bytes((c | 0x20) if 65 <= c <= 90 else c if (c in _ALNUM or c >= 128) else 32 for c in range(256))
LOWER_ONLY = bytes((c | 0x20) if 65 <= c <= 90 else c for c in range(256))
CASED_WORDS = bytes(c if (c in _ALNUM or c >= 128) else 32 for c in range(256))
_CAMEL = re.compile(rb"[a-z0-9][A-Z]|[A-Z][A-Z][a-z]")  # warpReduce, HTMLParser
_CAMEL_PART = re.compile(rb"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+|[^\x00-\x7f]+")

NAMES_SQL = (
    "coalesce(k.op_name, '') || ' ' || coalesce(k.task_id, '') || ' ' || coalesce(k.kernel_name, '') || ' ' || "
    "array_to_string(coalesce(k.strategy_tags, []), ' ') || ' ' || coalesce(k.cluster_label, '')"
)


def translated(column: pa.Array, table: bytes) -> pa.Array:
    """`column` (string, no nulls) with every byte mapped through `table`: same offsets, new data buffer."""
    column = column.cast(pa.large_string()) if column.type != pa.large_string() else column
    if column.offset:  # a slice shares its parent's buffers: copy it out first
        column = pa.concat_arrays([column])
    validity, offsets, data = column.buffers()
    new_data = pa.py_buffer(data.to_pybytes().translate(table)) if data is not None else None
    return pa.Array.from_buffers(pa.large_string(), len(column), [validity, offsets, new_data], column.null_count, 0)


def _camel_parts(token: bytes) -> bytes:
    return b" ".join(dict.fromkeys(p.lower() for p in _CAMEL_PART.findall(token)))


def distinct_words(cased: pa.Array) -> pa.Array:
    """Per row of `cased` (separators already spaces): its distinct words, and the parts of its camelCase ones,
    lower-cased, space-separated with a space at each end. The per-row work is set operations and joins (C
    loops); splitting camelCase is done once per distinct identifier of the archive."""
    data = cased.buffers()[2]
    raw = data.to_pybytes() if data is not None else b""
    offsets = np.frombuffer(cased.buffers()[1], dtype=np.int64)[: len(cased) + 1].tolist()
    rows = [set(raw[start:end].split()) for start, end in zip(offsets[:-1], offsets[1:], strict=True)]
    vocabulary: set[bytes] = set().union(*rows) if rows else set()
    camel = {t: _camel_parts(t) for t in vocabulary if _CAMEL.search(t)}
    camel_words = set(camel)
    out = []
    for tokens in rows:
        text = b" ".join(tokens)
        split = tokens & camel_words
        if split:
            text += b" " + b" ".join(camel[t] for t in split)
        out.append(b" " + text.lower() + b" ")
    return pa.array(out, type=pa.large_binary()).cast(pa.large_string())


def build(con: duckdb.DuckDBPyConnection) -> None:
    """Create `search_docs` on the archive's connection (needs its `kernels` table and `records` view)."""
    table = (
        con.cursor()
        .sql(
            f"SELECT k.kernel_id, {NAMES_SQL} AS names, coalesce(r.cuda_code, '') AS code "
            "FROM kernels k JOIN (SELECT kernel_id, cuda_code FROM records) r USING (kernel_id)"
        )
        .to_arrow_table()
    )
    code = table.column("code").combine_chunks()
    names = table.column("names").combine_chunks()
    docs = pa.table(
        {
            "kernel_id": table.column("kernel_id"),
            "names": pa.array([b" " + n + b" " for n in _names_words(names)], pa.large_binary()).cast(
                pa.large_string()
            ),
            "names_raw": translated(names, LOWER_ONLY),
            "words": distinct_words(translated(code, CASED_WORDS)),
            "code": translated(code, LOWER_WORDS),
            "raw": translated(code, LOWER_ONLY),
        }
    )
    cursor = con.cursor()
    cursor.register("search_docs_frame", docs)
    cursor.execute("CREATE TABLE search_docs AS SELECT * FROM search_docs_frame")
    cursor.unregister("search_docs_frame")


def _names_words(names: pa.Array) -> list[bytes]:
    cased = translated(names, CASED_WORDS)
    out = []
    for value in cased.to_pylist():
        tokens = value.encode().split()
        parts = [_camel_parts(t) for t in tokens if _CAMEL.search(t)]
        out.append(b" ".join([*tokens, *parts]).lower())
    return out
