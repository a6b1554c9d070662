"""Full-text query parsing and BM25 ranking SQL for the explorer's text search.

DuckDB's `fts` extension is not part of the Python wheel (it is downloaded on first `INSTALL fts`), and the
explorer must work offline, so the ranking is built here over the index of `explorer/text_index.py`. A query
word matches a kernel when some word of its names or code *starts with* the query word's stem (`tiling` -> `til`:
tile, tiled, tiles, tiling; camelCase parts are words too), found with a plain substring search for `' ' + stem`
in the kernel's space-separated distinct words (the fastest test DuckDB has). Quoted phrases match the text as
written, case aside.

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


def _occurrences(column: str) -> str:
    """How often the parameter (a needle) occurs in `column`; the needle is bound twice."""
    return f"((length({column}) - length(replace({column}, ?, ''))) // length(?))"


def match_sql(word: str) -> tuple[str, list]:
    """A kernel has a word starting with `word`, in its names or its code (camelCase parts included)."""
    return "(contains(names, ?) OR contains(words, ?))", [" " + word, " " + word]


def _frequency_sql(word: str) -> tuple[str, list]:
    """How often words starting with `word` occur: a hit in the names counts EXPLORER_SEARCH_NAME_WEIGHT; in the
    code, the separate words (at least one when only a camelCase part matched)."""
    weight = config.EXPLORER_SEARCH_NAME_WEIGHT
    sql = f"({weight} * {_occurrences('names')} + greatest({_occurrences('code')}, contains(words, ?)::INT))"
    return sql, [" " + word] * 5


def ranking_sql(query: TextQuery, idf: list[float], avg_length: float) -> tuple[str, list]:
    """SELECT kernel_id, score over search_docs: every word and phrase matched, scored by BM25F. Words are
    tested in the order given (rarest first, so later tests see few kernels)."""
    k1, b = config.EXPLORER_SEARCH_BM25_K1, config.EXPLORER_SEARCH_BM25_B
    where: list[str] = []
    where_params: list = []
    terms: list[str] = []
    term_params: list = []
    for word, word_idf in zip(query.words, idf, strict=True):
        match, match_params = match_sql(word)
        where.append(match)
        where_params += match_params
        tf, tf_params = _frequency_sql(word)
        terms.append(f"? * {tf} * {k1 + 1} / ({tf} + {k1} * (1 - {b} + {b} * length(code) / ?))")
        term_params += [word_idf, *tf_params, *tf_params, avg_length]
    for phrase in query.phrases:
        where.append("(contains(names_raw, ?) OR contains(raw, ?))")
        where_params += [phrase, phrase]
    score = " + ".join(terms) or "0"
    sql = f"SELECT kernel_id, {score} AS score FROM search_docs WHERE {' AND '.join(where) or 'TRUE'}"
    return sql, term_params + where_params
