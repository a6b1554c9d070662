"""Full-text query parsing and BM25 ranking SQL for the explorer's text search.

DuckDB's `fts` extension is not part of the Python wheel (it is downloaded on first `INSTALL fts`), and the
explorer must work offline, so the ranking is built here over two in-memory columns per kernel:

- `words`: op name, task id, kernel name, strategy tags, cluster label and code, lower-cased, camelCase split and
  every run of other characters turned into one space, with a space at each end. A query word matches a kernel
  when some word of it *starts with* the query word's stem (`tiling` -> `til`: tile, tiled, tiles, tiling), found
  with a plain substring search for `' ' + stem`, the fastest test DuckDB has;
- `raw`: the same fields as written, lower-cased, for quoted phrases, which match exactly (case aside).

Every query word and phrase must match (AND). Matches are ranked by Okapi BM25 over the words, a hit in the
names counting `EXPLORER_SEARCH_NAME_WEIGHT` times (BM25F's field weight), the document length being its
character count (BM25 needs only its ratio to the average). Query text only ever reaches SQL as parameters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from builder import config

_PHRASE = re.compile(r'"([^"]*)"')
_WORD = re.compile(r"[a-z0-9]+")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
# Suffixes folded so that a word's inflections share one stem; longest first, and only when a stem of at least
# EXPLORER_SEARCH_MIN_STEM characters is left (`uses` keeps its `s`, `relu` is untouched).
_SUFFIXES = ("ations", "ation", "tions", "tion", "ions", "ion", "ings", "ing", "ies", "ed", "es", "s", "e")


@dataclass(frozen=True)
class TextQuery:
    words: tuple[str, ...]  # stems, each must start a word of the kernel
    phrases: tuple[str, ...]  # lower-cased, each must occur exactly

    def is_empty(self) -> bool:
        return not self.words and not self.phrases


def stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= config.EXPLORER_SEARCH_MIN_STEM:
            if suffix == "s" and word.endswith("ss"):
                return word  # class, loss
            return word[: -len(suffix)]
    return word


def split_words(text: str) -> list[str]:
    """The words of `text` as the index holds them: camelCase split, lower-cased, alphanumeric runs."""
    return _WORD.findall(_CAMEL.sub(r"\1 \2", text).lower())


def parse(text: str) -> TextQuery:
    """Quoted parts are phrases (their words count for ranking too); the rest are words, stop words dropped
    unless nothing else is left (a query of only stop words still means something)."""
    phrases = [p.strip().lower() for p in _PHRASE.findall(text) if p.strip()]
    rest = _PHRASE.sub(" ", text).replace('"', " ")
    words = split_words(rest)
    kept = [w for w in words if w not in config.EXPLORER_SEARCH_STOP_WORDS] or words
    for phrase in phrases:
        kept += split_words(phrase)
    stems = tuple(dict.fromkeys(stem(w) for w in kept))[: config.EXPLORER_SEARCH_MAX_WORDS]
    return TextQuery(stems, tuple(dict.fromkeys(phrases))[: config.EXPLORER_SEARCH_MAX_WORDS])


# `words` and `raw` of every kernel: built once, on the first full-text search or by the background warm-up.
_NAMES = (
    "coalesce(k.op_name, '') || ' ' || coalesce(k.task_id, '') || ' ' || coalesce(k.kernel_name, '') || ' ' || "
    "array_to_string(coalesce(k.strategy_tags, []), ' ') || ' ' || coalesce(k.cluster_label, '')"
)


def _normalised(expr: str) -> str:
    camel = f"regexp_replace({expr}, '([a-z0-9])([A-Z])', '\\1 \\2', 'g')"
    return f"' ' || regexp_replace(lower({camel}), '[^a-z0-9]+', ' ', 'g') || ' '"


DOCS_SQL = (
    "CREATE TABLE search_docs AS SELECT k.kernel_id, "
    f"{_normalised(_NAMES)} AS names, {_normalised('coalesce(r.cuda_code, ' + chr(39) * 2 + ')')} AS code, "
    f"lower({_NAMES} || chr(10) || coalesce(r.cuda_code, '')) AS raw "
    "FROM kernels k JOIN (SELECT kernel_id, cuda_code FROM records) r USING (kernel_id)"
)


def _occurrences(column: str) -> str:
    """How often the parameter (a `' ' + stem` needle) occurs in `column`."""
    return f"((length({column}) - length(replace({column}, ?, ''))) // length(?))"


def ranking_sql(query: TextQuery, idf: list[float], avg_length: float) -> tuple[str, list]:
    """SELECT kernel_id, score over search_docs: every word and phrase matched, scored by BM25F."""
    k1, b = config.EXPLORER_SEARCH_BM25_K1, config.EXPLORER_SEARCH_BM25_B
    weight = config.EXPLORER_SEARCH_NAME_WEIGHT
    where: list[str] = []
    where_params: list = []
    terms: list[str] = []
    term_params: list = []
    for word, word_idf in zip(query.words, idf, strict=True):
        needle = " " + word
        where.append("(contains(names, ?) OR contains(code, ?))")
        where_params += [needle, needle]
        tf = f"({weight} * {_occurrences('names')} + {_occurrences('code')})"
        terms.append(f"? * {tf} * {k1 + 1} / ({tf} + {k1} * (1 - {b} + {b} * length(code) / ?))")
        term_params += [word_idf, *[needle] * 4, *[needle] * 4, avg_length]
    for phrase in query.phrases:
        where.append("contains(raw, ?)")
        where_params.append(phrase)
    score = " + ".join(terms) or "0"
    sql = f"SELECT kernel_id, {score} AS score FROM search_docs WHERE {' AND '.join(where) or 'TRUE'}"
    return sql, term_params + where_params
