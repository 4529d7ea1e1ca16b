"""The contract's recall over the in-memory text index (text_index.py): the index brought up to date
with the rows written since it was last read, a Source over the caller's corpus (the documents of the
scopes it may read), and the hits' payloads read and checked as every read's are (reads.py)."""

from __future__ import annotations

from array import array
from typing import Any

from ...errors import IntegrityError, NotFound
from ...recall.analysis import Seen
from ...recall.engine import Column, Source, Staged, search
from ...recall.query import Query as RecallQuery
from ..batch import Batch
from ..recall import Hit, in_transaction, searchable_text
from ..types import Found, Query, Rec, ScopeFilter
from .handles import LogHandle
from .index import Index
from .reads import Reads
from .text_index import TextIndex


class Search(Reads):
    """FileStore's part that serves recall, and keeps the text index caught up."""

    def _row_text(self, row: int) -> tuple[int, int, str | None]:
        """(scope code, seq, searchable text) of a row's latest version; no text when it is erased (its
        forget is being replayed) or not text."""
        index = self.index
        rec = index.rec_at(row)
        seq = rec.latest.seq
        try:
            packed = self.read_packed(rec.latest, None, rec.id, rec.scope)
        except NotFound:
            return index.cols["scope"][row], seq, None
        # (replay decoded these fields to read the tags, and refuses a log whose put does not decode)
        return index.cols["scope"][row], seq, searchable_text(packed)

    def catch_up_text(self) -> TextIndex:
        """The text index with every row indexed (the store's index lock is held by the caller)."""
        text = self.index.text
        if text.pending:
            text.catch_up(self._row_text)
            self._dirty_snapshot = True  # the next close saves the index, so that the next open has it
        return text

    def text_differences(self) -> list[str]:
        """How the text index differs from the text of the records it serves, read from the log and
        checked against the chain (after the index itself was found to agree with the log)."""
        with self._index_lock:
            index = self.index
            mine = self.catch_up_text()
            fresh = TextIndex()
            seen: Seen = {}
            for row in index.live_rows():
                scope, seq, text = self._row_text(row)
                if text is not None:
                    fresh.add(row, scope, text, seq, seen)
            name = index.scopes.values.__getitem__
            ours, theirs = mine.describe(index.id_at, name), fresh.describe(index.id_at, name)
        return [
            f"the text index of record {rec_id} differs from its latest version's text"
            for rec_id in sorted(set(ours) | set(theirs), key=str) if ours.get(rec_id) != theirs.get(rec_id)
        ]

    def recall(self, query: RecallQuery, scopes: ScopeFilter, tags: Query, limit: int) -> list[Hit]:
        batch = self.current_batch()
        for _attempt in range(5):
            with self._index_lock:
                ranked = self._rank(query, scopes, tags, limit, batch)
                handle = self._handles.acquire()  # the log the hits' offsets are in (reads.py)
            try:
                hits = self._read_hits(ranked, batch, handle)
            finally:
                self._handles.release(handle)
            if hits is not None:
                return hits
            self.refresh()  # a hit forgotten by another process meanwhile: rank again over what is left
        raise IntegrityError(f"{self.path}: recall could not read its hits: the log keeps changing under it")

    def _rank(
        self, query: RecallQuery, scopes: ScopeFilter, tags: Query, limit: int, batch: Batch | None
    ) -> list[tuple[Rec, float]]:
        """The best records and their scores (the index lock held)."""
        index = self.index
        text = self.catch_up_text()
        codes: set[int] | None = {
            code for code, scope in enumerate(index.scopes.values) if isinstance(scope, str) and scopes.admits(scope)
        }
        if codes is not None and codes.issuperset(text.scope_totals):
            codes = None  # every document is the caller's: no filter to apply
        base = _FileSource(self, index, text, codes)

        def key_of(rec_id: str) -> int | None:
            row = index.row_of(rec_id)
            doc = None if row is None else text.doc_of(row)
            if doc is None or (codes is not None and text.doc_scope[doc] not in codes):
                return None
            return doc

        def text_of(rec: Rec) -> str | None:  # (under the index lock: the current log is the index's)
            return searchable_text(self.read_packed(rec.latest, batch, rec.id, rec.scope))

        def staged(key: Staged) -> Rec:
            rec = batch.recs[key.rec_id] if batch is not None else None
            assert rec is not None  # the overlay's documents are its live records
            return rec

        def keep(key: int | Staged) -> bool:
            found = staged(key).tags if isinstance(key, Staged) else index.tags_at(text.doc_row[key])
            return tags.matches(found)

        source: Any = in_transaction(base, batch, scopes, key_of, text_of)
        filtered = tags.tags or tags.any_tags or tags.tag_prefix is not None
        ranked = search(query, source, limit, keep if filtered else None)
        return [
            (staged(key) if isinstance(key, Staged) else index.rec_at(text.doc_row[key]), score)
            for key, score in ranked
        ]

    def _read_hits(self, recs: list[tuple[Rec, float]], batch: Batch | None, handle: LogHandle) -> list[Hit] | None:
        """Each hit with its latest packed fields read through `handle`, checked; None if one was erased
        since the ranking."""
        out: list[Hit] = []
        quick = self._quick_packed([(rec, rec.latest) for rec, _ in recs], handle)
        for (rec, score), checked in zip(recs, quick, strict=True):
            packed: bytes | memoryview
            if checked is not None:
                packed = checked
            else:
                try:
                    packed = self._packed(rec, rec.latest, batch, handle)
                except NotFound:
                    return None
            out.append(Hit(Found(rec, (packed,)), score))
        return out


class _FileSource(Source[int]):
    """The text index over one caller's corpus: the documents of the scope codes `codes` (None: all)."""

    def __init__(self, store: Search, index: Index, terms: TextIndex, codes: set[int] | None) -> None:
        self.store, self.index, self.terms, self.codes = store, index, terms, codes
        self.mask = terms.scope_mask(codes)

    def totals(self) -> tuple[int, int]:
        terms = self.terms
        return terms.totals(terms.scope_totals if self.codes is None else self.codes)

    def postings(self, term: str) -> dict[int, int]:
        return self.terms.postings(term, self.mask)

    def expand(self, prefix: str) -> list[str]:
        return list(self.terms.expand(prefix))

    def lengths(self) -> array[int]:
        return self.terms.doc_len

    def norms(self, avg: float, wanted: int) -> Column[int, float]:
        return self.terms.norms(avg, wanted)

    def seqs(self) -> array[int]:
        return self.terms.doc_seq

    def text(self, key: int) -> str:
        return self.store._row_text(self.terms.doc_row[key])[2] or ""
