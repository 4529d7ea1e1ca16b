"""The contract's recall over the in-memory text index (text_index.py): the index brought up to date
with the rows written since it was last read, a Source over the caller's corpus (the documents of the
scopes it may read), and the hits' payloads read and checked as every read's are (reads.py)."""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

from ...errors import IntegrityError, NotFound
from ...recall._numpy import np
from ...recall.analysis import Seen
from ...recall.embedding import Embedder, embed, sampled, unit_or_zero
from ...recall.engine import Column, Source, Staged, search
from ...recall.fusion import fuse
from ...recall.query import Query as RecallQuery
from ..batch import Batch
from ..recall import Hit, in_transaction, lexical_side, searchable_text
from ..types import Found, Query, Rec, ScopeFilter
from .handles import LogHandle
from .index import Index
from .reads import Reads
from .text_index import TextIndex
from .vector_index import VectorIndex


class Search(Reads):
    """FileStore's part that serves recall, and keeps the text and vector indexes caught up."""

    embedder: Embedder | None = None  # set by FileStore: semantic and hybrid recall need one

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

    def catch_up_text(self, read: Callable[[int], tuple[int, int, str | None]] | None = None) -> TextIndex:
        """The text index with every row indexed (the store's index lock is held by the caller); `read`
        instead of _row_text, when given."""
        text = self.index.text
        if text.pending:
            text.catch_up(read or self._row_text)
            self._dirty_snapshot = True  # the next close saves the index, so that the next open has it
        return text

    def catch_up_vectors(
        self, read: Callable[[int], tuple[int, int, str | None]] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> VectorIndex:
        """The vector index with every row embedded, made for every live row if the index has none
        (the index lock held; the store has an embedder). EmbedderMismatch if its vectors were made by
        another embedder."""
        embedder = self.embedder
        assert embedder is not None  # (the client refuses a semantic mode without one)
        index = self.index
        vectors = index.vectors
        if vectors is None:
            vectors = index.vectors = VectorIndex.fresh(embedder, index.live_rows())
        vectors.check(embedder)
        if vectors.pending:
            self._dirty_snapshot = True
            vectors.catch_up(read or self._row_text, embedder, progress)
        return vectors

    def reindex(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Every live record's vector made again with this store's embedder, whatever made the ones the
        index holds, and the snapshot written with them; the number of vectors."""
        with self.writing(), self._index_lock:  # (the writer lock: the snapshot is of this head)
            self.index.vectors = None
            vectors = self.catch_up_vectors(progress=progress)
            self._write_snapshot()
            return len(vectors.row_slot)

    def text_differences(self) -> list[str]:
        """How the text index differs from the text of the records it serves, read from the log and
        checked against the chain (after the index itself was found to agree with the log). Each
        document it holds is compared with the record's text analysed again; a row it has yet to index
        (pending) is indexed from the log when recall next runs, so only the text this process holds for
        it (hold) is compared with the log's; a live row with text that is neither is a difference."""
        with self._index_lock:
            index = self.index
            mine = index.text
            fresh = TextIndex()
            seen: Seen = {}
            missing = [index.id_at(row) for row, kept in mine.held.items() if kept != self._row_text(row)]
            for row in index.live_rows_outside(mine.pending):
                scope, seq, text = self._row_text(row)
                if text is None:
                    continue
                if mine.doc_of(row) is None:
                    missing.append(index.id_at(row))
                fresh.add(row, scope, text, seq, seen)
            name = index.scopes.values.__getitem__
            ours, theirs = mine.describe(index.id_at, name), fresh.describe(index.id_at, name)
        differ = {rec_id for rec_id in set(ours) | set(theirs) if ours.get(rec_id) != theirs.get(rec_id)}
        return [
            f"the text index of record {rec_id} differs from its latest version's text"
            for rec_id in sorted(differ | set(missing), key=str)
        ]

    def vector_differences(self, recompute: bool = False) -> list[str]:
        """How the vector index differs from the records it serves: a vector for a record that is gone,
        for a version that is not its latest or whose content is not text, in another scope, not finite
        or not of unit length (nor zero), or, with the embedder that made them, other than the one its
        text gives now (every vector with `recompute`, else a sample of VERIFY_SAMPLE: a vector is tied
        to its version by seq, and a version's text never changes); and a record with text that has
        neither a vector nor a pending one."""
        with self._index_lock:
            index = self.index
            vectors = index.vectors
            if vectors is None:
                return []
            ours = vectors.describe(index.id_at)
            want: dict[str, tuple[int, int, str]] = {}
            for row in index.live_rows():
                scope, seq, text = self._row_text(row)
                rec_id = index.id_at(row)
                if text is not None and rec_id is not None and row not in vectors.pending:
                    want[rec_id] = (scope, seq, text)
            same = self.embedder is not None and (vectors.name, vectors.dimension) == (
                self.embedder.name, self.embedder.dimension)
            both = sorted(want.keys() & ours.keys(), key=lambda rec_id: ours[rec_id][1])  # (in seq order)
            ids = [both[i] for i in sampled(len(both), recompute)] if same else []
            fresh = embed(self.embedder, [want[i][2] for i in ids]) if same and self.embedder is not None else None
            fresh_of = {} if fresh is None else dict(zip(ids, fresh, strict=True))
        out = [f"the vector index holds a vector of record {rec_id}, which has no text to embed"
               for rec_id in sorted(ours.keys() - want.keys(), key=str)]
        out += [f"the vector of record {rec_id} is missing" for rec_id in sorted(want.keys() - ours.keys())]
        for rec_id in both:
            scope, seq, vector = ours[rec_id]
            if (scope, seq) != want[rec_id][:2]:
                out.append(f"the vector of record {rec_id} is of another version or scope than its latest")
            elif not unit_or_zero(vector):
                out.append(f"the vector of record {rec_id} is not finite and of unit length")
            elif rec_id in fresh_of and not np.allclose(vector, fresh_of[rec_id], atol=1e-5):
                out.append(f"the vector of record {rec_id} differs from the one its latest version's text gives")
        return out

    def recall(
        self, query: RecallQuery, scopes: ScopeFilter, tags: Query, limit: int, mode: str = "lexical"
    ) -> list[Hit]:
        batch = self.current_batch()
        for _attempt in range(5):
            with self._index_lock:
                ranked: list[tuple[Rec, float, float | None, float | None]]
                if mode == "lexical":
                    ranked = [(rec, score, score, None) for rec, score in self._rank(query, scopes, tags, limit, batch)]
                else:
                    ranked = self._rank_by_meaning(query, scopes, tags, limit, batch, mode)
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
        key_of = self._doc_key(codes)
        text_of = self._text_of(batch)

        def staged(key: Staged) -> Rec:
            rec = batch.recs[key.rec_id] if batch is not None else None
            assert rec is not None  # the overlay's documents are its live records
            return rec

        def keep(key: int | Staged) -> bool:
            found = staged(key).tags if isinstance(key, Staged) else index.tags_at(text.doc_row[key])
            return tags.matches(found)

        source: Any = in_transaction(base, batch, scopes, key_of, text_of)
        filtered = tags.filters_tags
        ranked = search(query, source, limit, keep if filtered else None)
        return [
            (staged(key) if isinstance(key, Staged) else index.rec_at(text.doc_row[key]), score)
            for key, score in ranked
        ]

    def _rank_by_meaning(
        self, query: RecallQuery, scopes: ScopeFilter, tags: Query, limit: int, batch: Batch | None, mode: str,
    ) -> list[tuple[Rec, float, float | None, float | None]]:
        """The best records in a semantic or hybrid `mode`, with their scores (the index lock held)."""
        embedder = self.embedder
        assert embedder is not None
        index = self.index
        fetched: dict[int, tuple[int, int, str | None]] = {}  # texts the vectors read, for the text index
        pending_text = index.text.pending

        def read(row: int) -> tuple[int, int, str | None]:
            found = self._row_text(row)
            if row in pending_text:
                fetched[row] = found
            return found

        vectors = self.catch_up_vectors(read)
        text = self.catch_up_text(lambda row: fetched.pop(row, None) or self._row_text(row))
        codes: set[int] | None = {
            code for code, scope in enumerate(index.scopes.values) if isinstance(scope, str) and scopes.admits(scope)
        }
        slots = vectors.corpus(codes)
        # An open transaction's records: their committed vectors are out, their staged texts embedded now.
        written = batch.recs if batch is not None else {}
        hidden = [row for rec_id in written if (row := index.row_of(rec_id)) is not None]
        if hidden:
            slots = slots[~np.isin(vectors.slot_row[slots], np.asarray(hidden, dtype=np.int64))]
        staged: list[Rec] = []
        staged_texts: list[str] = []
        text_of = self._text_of(batch)
        for rec in written.values():
            if rec is not None and scopes.admits(rec.scope):
                staged_text = text_of(rec)
                if staged_text is not None:
                    staged.append(rec)
                    staged_texts.append(staged_text)
        found = embed(embedder, [query.meaning, *staged_texts])
        cosines = np.concatenate([vectors.cosines(found[0])[slots], np.einsum("ij,j->i", found[1:], found[0])])
        seqs = np.concatenate([vectors.slot_seq[slots], np.asarray([r.latest.seq for r in staged], dtype=np.int64)])
        position_of = np.full(vectors.used, -1, dtype=np.int64)
        position_of[slots] = np.arange(len(slots))
        staged_at = {rec.id: len(slots) + i for i, rec in enumerate(staged)}

        def position(key: int | Staged) -> int:
            if isinstance(key, Staged):
                return staged_at.get(key.rec_id, -1)
            slot = vectors.slot_of(text.doc_row[key])
            return -1 if slot is None else int(position_of[slot])

        base = _FileSource(self, index, text, codes)
        source: Any = in_transaction(base, batch, scopes, self._doc_key(codes), text_of)
        lexical, excluded = lexical_side(query, source, mode, len(seqs), position)
        n_committed = len(slots)

        def rec_at(at: int) -> Rec:
            return staged[at - n_committed] if at >= n_committed else index.rec_at(int(vectors.slot_row[slots[at]]))

        keep = None
        if tags.filters_tags:
            def keep(at: int) -> bool:
                return tags.matches(rec_at(at).tags)
        return [(rec_at(hit.position), hit.score, hit.lexical, hit.semantic)
                for hit in fuse(mode, cosines, seqs, lexical, excluded, limit, keep)]

    def _text_of(self, batch: Batch | None) -> Callable[[Rec], str | None]:
        """The searchable text of a record's latest version, staged in `batch` or committed (read under
        the index lock: the current log is the index's)."""
        return lambda rec: searchable_text(self.read_packed(rec.latest, batch, rec.id, rec.scope))

    def _doc_key(self, codes: set[int] | None) -> Callable[[str], int | None]:
        """The text index's document of a record's committed version in the corpus of `codes`, if any."""
        index, text = self.index, self.index.text

        def key_of(rec_id: str) -> int | None:
            row = index.row_of(rec_id)
            doc = None if row is None else text.doc_of(row)
            if doc is None or (codes is not None and text.doc_scope[doc] not in codes):
                return None
            return doc

        return key_of

    def _read_hits(
        self, recs: list[tuple[Rec, float, float | None, float | None]], batch: Batch | None, handle: LogHandle
    ) -> list[Hit] | None:
        """Each hit with its latest packed fields read through `handle`, checked; None if one was erased
        since the ranking."""
        out: list[Hit] = []
        quick = self._quick_packed([(rec, rec.latest) for rec, *_ in recs], handle)
        for (rec, score, lexical, semantic), checked in zip(recs, quick, strict=True):
            packed: bytes | memoryview
            if checked is not None:
                packed = checked
            else:
                try:
                    packed = self._packed(rec, rec.latest, batch, handle)
                except NotFound:
                    return None
            out.append(Hit(Found(rec, (packed,)), score, lexical, semantic))
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
