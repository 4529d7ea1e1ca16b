"""Semantic and hybrid ranking over one corpus, given each document's cosine with the query and, for
hybrid, its BM25 score (engine.scored); no storage.

Semantic: a document's score is its cosine. Hybrid: a convex combination of the two rankings' scores,
each brought to [0, 1] over the corpus (the documents a recall may return: the caller's, less those an
excluded clause matches):

    score(d) = ALPHA · (cos(d) - min cos) / (max cos - min cos) + (1 - ALPHA) · bm25(d) / max bm25

where a document matching no word has a BM25 score of 0 (a term of 0 when no document matches, or when
every cosine is equal). Why a combination of scores and not reciprocal rank fusion, and why this ALPHA,
is measured in docs/RECALL.md §6: over a corpus of texts that all have a cosine, a rank discards how
far apart two cosines are, and RRF gives the hundredth nearest text about what it gives the tenth.

Every document of the corpus has a score, so either mode answers `limit` documents when the corpus holds
that many. Equal scores rank the newest (highest seq) first, as lexical recall's do. Every step is an
element-wise operation or an exact selection, so a score depends on the corpus alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from ._numpy import np

if TYPE_CHECKING:
    from numpy.typing import NDArray

ALPHA = 0.7
"""The semantic ranking's weight in a hybrid score (docs/RECALL.md §6 has the measurement)."""


class Fused(NamedTuple):
    """One document a semantic or hybrid recall found: its position in the corpus arrays, its score,
    and what each ranking gave it: its BM25 score (None in semantic mode) and its cosine."""

    position: int
    score: float
    lexical: float | None
    semantic: float


def fuse(
    mode: str, cosines: NDArray[np.float32], seqs: NDArray[np.int64], lexical: NDArray[np.float64] | None,
    excluded: NDArray[np.bool_], limit: int, keep: Callable[[int], bool] | None = None,
) -> list[Fused]:
    """The `limit` best documents of a corpus of len(cosines) documents in `mode` ("semantic" or
    "hybrid"), best first, equal scores highest seq first; `lexical` holds each one's BM25 score
    (hybrid), `excluded` marks those an excluded clause matches (never returned), `keep` filters the
    hits (by position) without changing the corpus. Precondition: the arrays have one entry per
    document; limit >= 0."""
    n = len(cosines)
    alive = ~excluded
    if n == 0 or limit == 0 or not alive.any():
        return []
    near = cosines.astype(np.float64)
    if mode == "semantic":
        scores = near.copy()
    else:
        assert lexical is not None
        low, high = near[alive].min(), near[alive].max()
        scores = (near - low) * (ALPHA / (high - low)) if high > low else np.zeros(n)
        best = lexical[alive].max()
        if best > 0:
            scores += lexical * ((1 - ALPHA) / best)
    scores[excluded] = -np.inf
    return [
        Fused(int(p), float(scores[p]), None if lexical is None else float(lexical[p]), float(cosines[p]))
        for p in _best(scores, seqs, limit, keep)
    ]


def _best(
    scores: NDArray[np.float64], seqs: NDArray[np.int64], limit: int, keep: Callable[[int], bool] | None
) -> list[int]:
    """The positions of the `limit` best finite scores passing `keep`, highest first, equal scores
    highest seq first. The candidates are every score at least the m-th highest, ordered whole; m grows
    until `limit` pass `keep` or none is left, so a document outside them never ranks above one inside."""
    n = len(scores)
    wanted = max(4 * limit, 64)
    while True:
        if wanted < n:
            threshold = np.partition(scores, n - wanted)[n - wanted]
            candidates = np.flatnonzero(scores >= threshold)
        else:
            candidates = np.arange(n)
        ordered = candidates[np.lexsort((-seqs[candidates], -scores[candidates]))]
        out: list[int] = []
        for position in ordered.tolist():
            if scores[position] == -np.inf:
                return out
            if keep is None or keep(position):
                out.append(position)
                if len(out) == limit:
                    return out
        if wanted >= n:
            return out
        wanted *= 8


__all__ = ["ALPHA", "Fused", "fuse"]
