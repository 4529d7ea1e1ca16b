"""Recall as every backend serves it: what a record's searchable text is, and a backend's index seen
through an open transaction (its own writes in, what it replaced or forgot out). The index itself is
the backend's (the file backend keeps it in memory, PostgreSQL in its tables); the ranking is
mnemo.recall.engine's."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from ..chain.codec import decode_record_fields
from ..recall._numpy import np
from ..recall.engine import Overlay, Source, StagedDoc, scored
from ..recall.query import Query as RecallQuery
from .batch import Batch
from .types import Found, Rec, ScopeFilter

if TYPE_CHECKING:
    from numpy.typing import NDArray

K = TypeVar("K", bound=Hashable)


class Hit(NamedTuple):
    """A record recall found: with its latest version's packed fields, its score, and what each ranking
    gave it: its BM25 score (None in semantic mode) and its cosine with the query (None in lexical
    mode)."""

    found: Found
    score: float
    lexical: float | None = None
    semantic: float | None = None


def searchable_text(packed: bytes | memoryview) -> str | None:
    """The text recall indexes of a version, from its packed record fields: its content when that is a
    str (content given as bytes is not searched). ValueError if the fields do not decode."""
    content = decode_record_fields(packed)[0]
    return content if isinstance(content, str) else None


def in_transaction(
    base: Source[K], batch: Batch | None, scopes: ScopeFilter, key_of: Callable[[str], K | None],
    text_of: Callable[[Rec], str | None],
) -> Source[K] | Overlay[K]:
    """`base` as this thread's open transaction sees it: the committed documents of the records it
    wrote or forgot left out, the latest version it wrote of each record still live put in.
    `key_of(id)`: the base's key of a record's committed document, None when it is not in the base's
    corpus; `text_of(rec)`: the searchable text of a record's latest version, staged or committed."""
    if batch is None or not batch.recs:
        return base
    hidden: list[K] = []
    added: dict[str, StagedDoc] = {}
    for rec_id, rec in batch.recs.items():
        key = key_of(rec_id)
        if key is not None:
            hidden.append(key)
        if rec is not None and scopes.admits(rec.scope):
            text = text_of(rec)
            if text is not None:
                added[rec_id] = StagedDoc.of(text, rec.latest.seq)
    return Overlay(base, hidden, added)


def lexical_side(
    query: RecallQuery, source: Any, mode: str, n: int, position: Callable[[Any], int]
) -> tuple[NDArray[np.float64] | None, NDArray[np.bool_]]:
    """What lexical recall gives a semantic or hybrid ranking over a corpus of `n` documents: each one's
    BM25 score (hybrid mode; None in semantic mode, where only exclusions are read) and which of them an
    excluded clause matches, from `source` (the corpus's text index, as in_transaction gives it), its
    keys placed by `position` (-1: not in the corpus)."""
    scores, left_out = scored(query, source, include=mode == "hybrid")
    lexical = np.zeros(n) if mode == "hybrid" else None
    excluded = np.zeros(n, dtype=np.bool_)
    for key in left_out:
        if (at := position(key)) >= 0:
            excluded[at] = True
    if lexical is not None:
        for key, score in scores.items():
            if (at := position(key)) >= 0:
                lexical[at] = score
    return lexical, excluded


__all__ = ["Hit", "in_transaction", "lexical_side", "searchable_text"]
