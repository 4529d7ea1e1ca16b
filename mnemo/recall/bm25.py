"""Okapi BM25 over statistics the caller gives, and the ranking it orders; no storage.

For a query's features q (terms and phrases, mnemo.recall.query.Feature) and a document d of length |d|
(the number of its terms, mnemo.recall.analysis), over a corpus of N documents whose average length is
avgdl, where n(q) documents hold q and d holds it tf(q, d) times:

    score(d) = Σ_q IDF(q) · tf(q, d) · (k1 + 1) / (tf(q, d) + k1 · (1 - b + b · |d| / avgdl))
    IDF(q)   = ln(1 + (N - n(q) + 0.5) / (n(q) + 0.5))

with k1 = 1.2 and b = 0.75. A phrase is a feature of its own: its tf is the number of places it occurs in
d and n its number of documents. A prefix is the sum over the terms it expands to that d holds, each with
its own IDF. The corpus is what the caller says it is (for recall: the records the caller may read), so a
score depends on nothing else. Equal scores rank the newest (highest seq) first.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

K1 = 1.2
B = 0.75

F = TypeVar("F", bound=Hashable)


def idf(n_docs: int, doc_freq: int) -> float:
    """ln(1 + (N - n + 0.5) / (n + 0.5)). Precondition: 0 <= doc_freq <= n_docs. Always > 0."""
    return math.log1p((n_docs - doc_freq + 0.5) / (doc_freq + 0.5))


def saturation(tf: int, length: int, avg_length: float) -> float:
    """tf · (k1 + 1) / (tf + k1 · (1 - b + b · length / avg_length)). Precondition: tf >= 1, length >= 1
    and avg_length > 0 (a document holding a term has a term, so a corpus holding it has a positive
    average length)."""
    return tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / avg_length))


@dataclass(frozen=True)
class Corpus(Generic[F]):
    """The statistics scores are computed over: N, the average length, and n for each feature asked
    about. Precondition: every feature a candidate holds is in `doc_freqs`, with 1 <= n <= n_docs."""

    n_docs: int
    avg_length: float
    doc_freqs: Mapping[F, int]


@dataclass(frozen=True)
class Candidate(Generic[F]):
    """One matching document: its seq (ties rank the highest first), its length, and the frequency of
    each query feature it holds (features it lacks are absent or 0)."""

    seq: int
    length: int
    freqs: Mapping[F, int]


@dataclass(frozen=True)
class Scored(Generic[F]):
    score: float
    candidate: Candidate[F]


def score(candidate: Candidate[F], corpus: Corpus[F]) -> float:
    """The BM25 score of `candidate` in `corpus`; features are summed in a fixed order (sorted by their
    repr), so that the same inputs give the same float whatever order the mapping has."""
    total = 0.0
    for feature, tf in sorted(candidate.freqs.items(), key=lambda item: repr(item[0])):
        if tf > 0:
            total += idf(corpus.n_docs, corpus.doc_freqs[feature]) * saturation(
                tf, candidate.length, corpus.avg_length)
    return total


def rank(candidates: Iterable[Candidate[F]], corpus: Corpus[F], limit: int) -> list[Scored[F]]:
    """The `limit` best candidates, highest score first, equal scores newest (highest seq) first.
    Precondition: limit >= 0; seqs are distinct."""
    scored = (Scored(score(candidate, corpus), candidate) for candidate in candidates)
    return heapq.nsmallest(limit, scored, key=lambda s: (-s.score, -s.candidate.seq))
