"""Readable cluster labels: class-based TF-IDF over a kernel-engineering vocabulary.

Each kernel contributes the terms of `label_terms.kernel_terms` (op category and family, op words of its
task name, strategy tags, libraries called), never its identifiers. A term's weight in cluster c is
share(t, c) * log(1 + A / f(t)): share is the fraction of c's kernels that have the term, f(t) the number
of kernels with it over all clusters (noise included) and A the mean number of kernels per cluster. A label
names the heaviest op term and the heaviest strategy term that at least `config.CLUSTER_LABEL_MIN_SHARE` of
the cluster has: "GEMM + epilogue · shared-memory tiling". Clusters whose labels would be equal get their
next distinguishing terms ("convolution (3-D) · naive" vs "convolution (1-D) · naive"), and only when the
vocabulary cannot tell them apart, a number ordered by their smallest kernel id.

Labels depend only on which kernels (their terms and ids) are in which cluster, never on cluster ids or
input order: the same cluster content gets the same label after a refit that renumbers clusters.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from builder import config
from builder.embed.label_terms import HOW_FACETS, SECONDARY_TERMS, WHAT_FACETS, facet, term_text

LABEL_SEPARATOR = " · "  # between what a cluster computes and how


@dataclass
class _Label:
    what: list[str] = field(default_factory=list)  # category or family term, then op qualifiers
    how: list[str] = field(default_factory=list)
    remaining: list[str] = field(default_factory=list)  # ranked terms not used yet, for disambiguation
    eligible: set[str] = field(default_factory=set)

    def text(self) -> str:
        lead = _unique(term_text(t) for t in self.what if facet(t) != "op")
        qualifiers = _unique(term_text(t) for t in self.what if facet(t) == "op" and term_text(t) not in lead)
        what = ", ".join(lead)
        if qualifiers:
            what = f"{what} ({', '.join(qualifiers)})" if what else ", ".join(qualifiers)
        how = ", ".join(_unique(term_text(t) for t in self.how))
        return LABEL_SEPARATOR.join(part for part in (what, how) if part)

    def add(self, term: str) -> None:
        self.remaining.remove(term)
        (self.how if facet(term) in HOW_FACETS else self.what).append(term)


def label_phrases(label: str) -> list[str]:
    """The vocabulary phrases a label is made of (its number, if any, dropped): the inverse of `_Label.text`."""
    label = re.sub(r" #\d+$", "", label)
    parts = label.replace(" (", LABEL_SEPARATOR).replace(")", "").split(LABEL_SEPARATOR)
    return [phrase for part in parts for phrase in part.split(", ")]


def _unique(words: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(words))


def cluster_labels(
    terms: Sequence[Iterable[str]], cluster_ids: Sequence[int], kernel_ids: Sequence[str]
) -> dict[int, str]:
    """cluster id -> label; noise (-1) gets config.NOISE_CLUSTER_LABEL.

    `terms[i]` are kernel i's vocabulary terms (`label_terms.kernel_terms`); `kernel_ids` order clusters that
    the vocabulary cannot tell apart.
    """
    counts: dict[int, Counter[str]] = {}
    sizes: Counter[int] = Counter()
    first_kernel: dict[int, str] = {}
    for kernel_terms, cluster, kernel_id in zip(terms, cluster_ids, kernel_ids, strict=True):
        cluster = int(cluster)
        counts.setdefault(cluster, Counter()).update(set(kernel_terms))
        sizes[cluster] += 1
        first_kernel[cluster] = min(first_kernel.get(cluster, kernel_id), kernel_id)
    labels = {-1: config.NOISE_CLUSTER_LABEL} if -1 in counts else {}
    clusters = sorted((c for c in counts if c >= 0), key=lambda c: first_kernel[c])
    if not clusters:
        return labels
    kernels_with: Counter[str] = Counter()
    for cluster_counts in counts.values():
        kernels_with.update(cluster_counts)
    mean_size = sum(sizes.values()) / len(counts)

    def weight(term: str, cluster: int) -> float:
        return counts[cluster][term] / sizes[cluster] * math.log1p(mean_size / kernels_with[term])

    drafts = {c: _draft(counts[c], sizes[c], lambda t, c=c: weight(t, c)) for c in clusters}
    _tell_apart(drafts, clusters)
    texts = {c: drafts[c].text() or f"cluster {c}" for c in clusters}
    _number_equal(texts, clusters)
    labels.update(texts)
    return labels


def _draft(cluster_counts: Counter[str], size: int, weight) -> _Label:
    # Strategies before their modifiers, then heaviest first, ties alphabetical so labels are reproducible.
    ranked = sorted(cluster_counts, key=lambda t: (t in SECONDARY_TERMS, -weight(t), t))
    eligible = [t for t in ranked if cluster_counts[t] / size >= config.CLUSTER_LABEL_MIN_SHARE]
    label = _Label(remaining=list(eligible), eligible=set(eligible))
    lead = next((t for t in eligible if facet(t) in WHAT_FACETS and facet(t) != "op"), None)
    if lead:
        label.add(lead)
        # A category and its family can read alike ("elementwise"): the twin says nothing new.
        for twin in [t for t in label.remaining if facet(t) in WHAT_FACETS and term_text(t) == term_text(lead)]:
            label.remaining.remove(twin)
    for term in [t for t in eligible if facet(t) in HOW_FACETS][: config.CLUSTER_LABEL_HOW_TERMS]:
        label.add(term)
    if not label.what and not label.how and ranked:  # nothing holds for half the cluster: its heaviest term
        label.remaining = list(ranked)
        label.add(ranked[0])
    return label


def _tell_apart(drafts: dict[int, _Label], clusters: list[int]) -> None:
    """Add distinguishing terms to clusters whose labels are equal, a few rounds at most."""
    for _ in range(config.CLUSTER_LABEL_MAX_QUALIFIERS):
        groups: dict[str, list[int]] = {}
        for c in clusters:
            groups.setdefault(drafts[c].text(), []).append(c)
        clashing = [group for group in groups.values() if len(group) > 1]
        if not clashing:
            return
        for group in clashing:
            for c in group:
                others = [drafts[o] for o in group if o != c]
                # Prefer a term some other member of the group does not have: it is what sets c apart.
                choice = next(
                    (t for t in drafts[c].remaining if any(t not in o.eligible for o in others)),
                    None,
                )
                if choice is not None:
                    drafts[c].add(choice)


def _number_equal(texts: dict[int, str], clusters: list[int]) -> None:
    """Equal labels left after disambiguation: the second and later (by smallest kernel id) get #2, #3."""
    seen: Counter[str] = Counter()
    for c in clusters:  # already ordered by smallest kernel id
        seen[texts[c]] += 1
        if seen[texts[c]] > 1:
            texts[c] = f"{texts[c]} #{seen[texts[c]]}"
