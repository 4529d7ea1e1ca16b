"""Recall's index in the file backend: the terms of each live record's latest version whose content is
text, kept in memory beside the index (index.py) and in its snapshot.

A document is one indexed version, numbered in the order documents were made; its number never changes,
so the postings need no renumbering when the index's rows are (a snapshot orders rows by id). Each
document knows its row, scope and length, and the distinct terms it holds (so that it leaves every
posting when its record is updated or forgotten, even when its text can no longer be read). Each term
has one posting: documents in increasing order, with how often each holds the term. Each scope keeps
its number of documents and their total length, so that the statistics of any set of scopes are sums.

The index learns of a change from the index's rows: a forgotten or replaced version leaves at once (its
record's `drop` or `put`); a new version is indexed when recall next reads the index, or before a
snapshot is written (its text is read from the log then), so that writes pay nothing for a search they
may never need. Nothing of a document that left is kept: its terms leave the vocabulary when no other
document holds them.
"""

from __future__ import annotations

import bisect
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator
from itertools import accumulate
from typing import Any

from ..._native import speedups
from ...recall.analysis import Seen, counted
from ...recall.engine import Column, norm

TEXT_LAYOUT = 1
# Document numbers of postings, and term ids of a document's list, are this type.
_CODE = "I"


class RowDerived:
    """What an index derived from the rows' latest versions (the text index, the vectors) hears of them:
    a row's departing version leaves at once (`remove_row`), and a new one waits in `pending` until the
    index next catches up, when its text is read from the log."""

    pending: set[int]

    def remove_row(self, row: int) -> None:
        """Row `row`'s record was forgotten (or replaced): what was derived from it leaves."""
        raise NotImplementedError

    def changed(self, row: int) -> None:
        """Row `row` has a new latest version: the old one's part leaves now, the new one's is made at
        the next catch-up."""
        self.remove_row(row)
        self.pending.add(row)

    def added(self, rows: Iterable[int]) -> None:
        """New rows, not indexed yet."""
        self.pending.update(rows)


class TextIndex(RowDerived):
    """Terms -> documents, documents -> terms, scope totals, and the rows not indexed yet. Not
    thread-safe: the store's index lock is held by whoever reads or changes it."""

    def __init__(self) -> None:
        self.term_ids: dict[str, int] = {}
        self.terms: list[str | None] = []  # term id -> term (None: free)
        self.free: list[int] = []  # term ids to reuse
        # term id -> its documents, in increasing order, and how often each holds it; None: still in
        # the snapshot's arrays it was loaded from (_loaded), taken out when first used (see posting)
        self.docs: list[array[int] | None] = []
        self.freqs: list[array[int] | None] = []
        self.doc_row = array("q")  # document -> its record's row (-1: the document left)
        self.doc_scope = array("I")  # document -> scope code (the index's Interned scopes)
        self.doc_len = array("I")  # document -> number of terms
        self.doc_seq = array("q")  # document -> the seq of the version it is
        self._norms: tuple[float, array[float]] | None = None  # (avgdl, each document's norm), see norms
        # document -> its distinct term ids, packed (b"": it left; None: in _loaded, see terms_of)
        self.doc_terms: list[bytes | None] = []
        # The snapshot's postings and term lists, with where each term's and document's begins: an open
        # slices out only what it uses, instead of an array per term and a bytes per document at once.
        self._loaded: tuple[array[int], array[int], array[int], array[int], array[int]] | None = None
        self.row_docs = array("q")  # row -> its document (-1: none; rows past its end have none)
        self.scope_totals: dict[int, list[int]] = {}  # scope code -> [documents, total length]
        self.pending: set[int] = set()  # rows whose latest version is not indexed yet
        self.sorted_terms: list[str] = []  # for prefixes; may lack new_terms and hold terms gone
        self.new_terms: list[str] = []
        self.gone_terms = 0

    def doc_of(self, row: int) -> int | None:
        """The document of row `row`, if it has one."""
        docs = self.row_docs
        doc = docs[row] if 0 <= row < len(docs) else -1
        return None if doc < 0 else doc

    def posting(self, tid: int, keep: bool = True) -> tuple[array[int], array[int]]:
        """Term `tid`'s documents and frequencies, taken out of the snapshot's arrays if still there
        (and kept, with `keep`, so that a change to them stays)."""
        docs, freqs = self.docs[tid], self.freqs[tid]
        if docs is not None and freqs is not None:
            return docs, freqs
        assert self._loaded is not None  # a term id with no arrays was loaded from a snapshot
        all_docs, all_freqs, starts = self._loaded[0], self._loaded[1], self._loaded[2]
        first, end = starts[tid], starts[tid + 1]
        docs, freqs = all_docs[first:end], all_freqs[first:end]
        if keep:
            self.docs[tid], self.freqs[tid] = docs, freqs
            # what changes now changes in the copy: the loaded one is zeroed, so that it never keeps
            # a document that leaves
            all_docs[first:end] = all_freqs[first:end] = array(_CODE, bytes(4 * (end - first)))
        return docs, freqs

    def terms_of(self, doc: int) -> array[int]:
        """Document `doc`'s distinct term ids (none once it left)."""
        listed = self.doc_terms[doc]
        if listed is not None:
            return array(_CODE, listed)
        assert self._loaded is not None  # a document with no list was loaded from a snapshot
        ids, starts = self._loaded[3], self._loaded[4]
        return ids[starts[doc]:starts[doc + 1]]

    # -- what the index's rows tell it -------------------------------------------------------------
    def remove_row(self, row: int) -> None:
        """Row `row`'s record was forgotten (or replaced): its document leaves every structure."""
        self.pending.discard(row)
        doc = self.doc_of(row)
        if doc is None:
            return
        self.row_docs[row] = -1
        scope = self.doc_scope[doc]
        totals = self.scope_totals[scope]
        totals[0] -= 1
        totals[1] -= self.doc_len[doc]
        if totals[0] == 0:
            del self.scope_totals[scope]
        listed = self.terms_of(doc)
        if self.doc_terms[doc] is None and self._loaded is not None:  # zeroed in the loaded lists too
            ids, starts = self._loaded[3], self._loaded[4]
            ids[starts[doc]:starts[doc + 1]] = array(_CODE, bytes(4 * len(listed)))
        self.doc_terms[doc] = b""
        for tid in listed:
            docs, freqs = self.posting(tid)
            i = bisect.bisect_left(docs, doc)
            del docs[i]
            del freqs[i]
            if not docs:
                self._drop_term(tid)
        self.doc_row[doc] = -1
        self.doc_len[doc] = 0
        self.doc_scope[doc] = 0
        self._norms = None  # (which held the departed document's norm; the average changed anyway)

    def _drop_term(self, tid: int) -> None:
        term = self.terms[tid]
        assert term is not None
        del self.term_ids[term]
        self.terms[tid] = None
        self.free.append(tid)
        self.gone_terms += 1

    def add(self, row: int, scope: int, text: str, seq: int, seen: Seen | None = None) -> None:
        """Index `text`, written by the entry `seq`, as row `row`'s document, in scope code `scope`
        (`seen`: the words analysed so far in this batch, analysis.analyse). Precondition: the row has
        none."""
        length, counts = counted(text, seen)
        doc = len(self.doc_row)
        self.doc_row.append(row)
        self.doc_scope.append(scope)
        self.doc_len.append(length)
        self.doc_seq.append(seq)
        self._norms = None
        docs = self.row_docs
        if row >= len(docs):
            docs.extend(array("q", [-1]) * (row + 1 - len(docs)))
        docs[row] = doc
        totals = self.scope_totals.get(scope)
        if totals is None:
            self.scope_totals[scope] = [1, length]
        else:
            totals[0] += 1
            totals[1] += length
        ids = array(_CODE)
        term_ids = self.term_ids
        for term, tf in counts.items():
            tid = term_ids.get(term)
            if tid is None:
                tid = self._new_term(term)
            docs, freqs = self.posting(tid)
            docs.append(doc)  # the newest document: the posting stays in order
            freqs.append(tf)
            ids.append(tid)
        self.doc_terms.append(ids.tobytes())

    def _new_term(self, term: str) -> int:
        if self.free:
            tid = self.free.pop()
            self.terms[tid] = term
            self.docs[tid] = array(_CODE)
            self.freqs[tid] = array(_CODE)
        else:
            tid = len(self.terms)
            self.terms.append(term)
            self.docs.append(array(_CODE))
            self.freqs.append(array(_CODE))
        self.term_ids[term] = tid
        self.new_terms.append(term)
        return tid

    def catch_up(self, read: Callable[[int], tuple[int, int, str | None]]) -> None:
        """Index every pending row: `read(row)` gives its scope code, and the seq and searchable text of
        its latest version (None: not text, so not indexed). Rows are indexed in row order."""
        seen: Seen = {}  # this catch-up's words, dropped with it
        for row in sorted(self.pending):
            scope, seq, text = read(row)
            self.pending.discard(row)
            if text is not None:
                self.add(row, scope, text, seq, seen)
        self.pending = set()  # an emptied set keeps its table: a catch-up of a million rows, 40 MB

    def norms(self, avg: float, wanted: int) -> Column[int, float]:
        """Each document's engine.norm for this average length, for `wanted` postings to score. All of
        them are computed, and kept until a document is added or the average changes, when the postings
        are many (so that recalls between writes compute them once); when they are few, each is computed
        as it is asked for (a write changes the average: a recall after each write must not pay for
        every document)."""
        cached = self._norms
        if cached is not None and cached[0] == avg:
            return cached[1]
        if wanted * 8 < len(self.doc_len):
            return _Norms(self.doc_len, avg)
        cached = self._norms = (avg, array("d", [norm(length, avg) for length in self.doc_len]))
        return cached[1]

    # -- reads -------------------------------------------------------------------------------------
    def totals(self, scopes: Iterable[int]) -> tuple[int, int]:
        docs = total = 0
        for scope in scopes:
            found = self.scope_totals.get(scope)
            if found is not None:
                docs += found[0]
                total += found[1]
        return docs, total

    def postings(self, term: str, scopes: set[int] | None) -> dict[int, int]:
        """Documents holding `term` (in one of `scopes`, None: any) -> how often."""
        tid = self.term_ids.get(term)
        if tid is None:
            return {}
        docs, freqs = self.posting(tid, keep=False)
        if scopes is None:
            return dict(zip(docs, freqs, strict=True))
        scope_of = self.doc_scope
        return {doc: tf for doc, tf in zip(docs, freqs, strict=True) if scope_of[doc] in scopes}

    def expand(self, prefix: str) -> Iterator[str]:
        """Every term starting with `prefix`, in order (the sorted list is brought up to date first)."""
        if self.new_terms or self.gone_terms > len(self.sorted_terms) // 4:
            known = self.term_ids
            merged = [t for t in self.sorted_terms if t in known] if self.gone_terms else self.sorted_terms
            merged.extend(self.new_terms)
            merged.sort()
            self.sorted_terms, self.new_terms, self.gone_terms = merged, [], 0
        ordered = self.sorted_terms
        for i in range(bisect.bisect_left(ordered, prefix), len(ordered)):
            term = ordered[i]
            if not term.startswith(prefix):
                break
            if term in self.term_ids:
                yield term

    # -- the snapshot ------------------------------------------------------------------------------
    def to_state(self, renumber: Callable[[int], int] | None) -> dict[str, Any]:
        """The index as plain data, its rows renumbered by `renumber` (old row -> new row; None: kept),
        with documents, terms and postings made dense, so nothing of a document that left is written.
        Rows not indexed yet are listed as such: a snapshot never waits for their text to be read."""
        live = [doc for doc in range(len(self.doc_row)) if self.doc_row[doc] >= 0]
        dense = {doc: new for new, doc in enumerate(live)}
        term_order = sorted(self.term_ids)
        new_tid = {self.term_ids[t]: i for i, t in enumerate(term_order)}
        rows = array("q", (self.doc_row[d] for d in live))
        pending = array("q", sorted(self.pending))
        if renumber is not None:
            rows = array("q", map(renumber, rows))
            pending = array("q", sorted(map(renumber, pending)))
        post_docs, post_freqs, post_lens = array(_CODE), array(_CODE), array(_CODE)
        for term in term_order:
            tid = self.term_ids[term]
            docs, freqs = self.posting(tid, keep=False)
            post_docs.extend(map(dense.__getitem__, docs))
            post_freqs.extend(freqs)
            post_lens.append(len(docs))
        doc_terms, doc_term_lens = array(_CODE), array(_CODE)
        for doc in live:
            ids = self.terms_of(doc)
            doc_terms.extend(map(new_tid.__getitem__, ids))
            doc_term_lens.append(len(ids))
        return {
            "layout": TEXT_LAYOUT,
            "byteorder": sys.byteorder,
            "terms": term_order,
            "post_lens": post_lens.tobytes(),
            "post_docs": post_docs.tobytes(),
            "post_freqs": post_freqs.tobytes(),
            "doc_row": rows.tobytes(),
            "doc_scope": array(_CODE, (self.doc_scope[d] for d in live)).tobytes(),
            "doc_len": array(_CODE, (self.doc_len[d] for d in live)).tobytes(),
            "doc_seq": array("q", (self.doc_seq[d] for d in live)).tobytes(),
            "doc_term_lens": doc_term_lens.tobytes(),
            "doc_terms": doc_terms.tobytes(),
            "pending": pending.tobytes(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], rows: int, scopes: int) -> TextIndex:
        """An index from to_state()'s data, for an index of `rows` rows and `scopes` scope codes.
        ValueError (or KeyError, TypeError, IndexError) on anything inconsistent."""
        if state["layout"] != TEXT_LAYOUT or state["byteorder"] != sys.byteorder:
            raise ValueError("text index of another layout or byte order")
        text = cls()
        terms = state["terms"]
        if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
            raise ValueError("text index terms are not strings")
        text.terms = list(terms)
        text.term_ids = {t: i for i, t in enumerate(terms)}
        text.sorted_terms = list(terms)
        text.doc_row = _column("q", state["doc_row"])
        n = len(text.doc_row)
        text.doc_scope = _column(_CODE, state["doc_scope"])
        text.doc_len = _column(_CODE, state["doc_len"])
        text.doc_seq = _column("q", state["doc_seq"])
        if len(text.doc_scope) != n or len(text.doc_len) != n or len(text.doc_seq) != n:
            raise ValueError("text index document columns differ in length")
        # Ranges are checked in bulk; the order of each posting is not (a million comparisons in
        # Python would cost more than the load): the checksum rules out accidents, and verify compares
        # the whole index with one built from the log, so a forged one is named there.
        if n and (min(text.doc_row) < 0 or max(text.doc_row) >= rows or max(text.doc_scope) >= scopes):
            raise ValueError("text index names a row or scope the index lacks")
        text.pending = set(_column("q", state["pending"]))
        if text.pending and (min(text.pending) < 0 or max(text.pending) >= rows):
            raise ValueError("text index names a row the index lacks")
        text.row_docs = array("q", [-1]) * rows
        for doc, row in enumerate(text.doc_row):
            text.row_docs[row] = doc
        if text.row_docs.count(-1) != rows - n or any(text.row_docs[row] >= 0 for row in text.pending):
            raise ValueError("text index names a row twice")
        post_lens = _column(_CODE, state["post_lens"])
        post_docs = _column(_CODE, state["post_docs"])
        post_freqs = _column(_CODE, state["post_freqs"])
        if len(post_lens) != len(terms) or len(post_docs) != sum(post_lens) or len(post_freqs) != len(post_docs):
            raise ValueError("text index postings do not match its terms")
        if post_docs and (column_max(post_docs) >= n or not min(post_lens)):
            raise ValueError("text index posting out of range")
        text.docs = [None] * len(terms)
        text.freqs = [None] * len(terms)
        lens = _column(_CODE, state["doc_term_lens"])
        ids = _column(_CODE, state["doc_terms"])
        if len(lens) != n or len(ids) != sum(lens) or (ids and column_max(ids) >= len(terms)):
            raise ValueError("text index document terms do not match")
        text.doc_terms = [None] * n
        text._loaded = (post_docs, post_freqs, _starts(post_lens), ids, _starts(lens))
        for doc in range(n):
            scope = text.doc_scope[doc]
            totals = text.scope_totals.setdefault(scope, [0, 0])
            totals[0] += 1
            totals[1] += text.doc_len[doc]
        return text

    def describe(
        self, row_id: Callable[[int], str | None], scope_name: Callable[[int], str]
    ) -> dict[str | None, tuple[str, int, int, dict[str, int]]]:
        """Each document as (scope, length, seq, term -> frequency), by its record's id: what verify compares
        with an index built from the log. A document whose own list of terms disagrees with the postings
        is described with a length of -1, so that it never compares equal."""
        freq_of: dict[int, dict[int, int]] = {}
        for tid, term in enumerate(self.terms):
            if term is not None:
                for doc, tf in zip(*self.posting(tid, keep=False), strict=True):
                    freq_of.setdefault(doc, {})[tid] = tf
        out: dict[str | None, tuple[str, int, int, dict[str, int]]] = {}
        for doc, row in enumerate(self.doc_row):
            if row < 0:
                continue
            held = freq_of.get(doc, {})
            listed = set(self.terms_of(doc))
            length = self.doc_len[doc] if listed == set(held) else -1
            found = {self.terms[t] or "": f for t, f in held.items()}
            out[row_id(row)] = (scope_name(self.doc_scope[doc]), length, self.doc_seq[doc], found)
        return out


class _Norms:
    """Documents' norms computed as they are asked for."""

    def __init__(self, lengths: array[int], avg: float) -> None:
        self.lengths, self.avg = lengths, avg

    def __getitem__(self, doc: int) -> float:
        return norm(self.lengths[doc], self.avg)


def _starts(lengths: array[int]) -> array[int]:
    """Where each of back-to-back runs of these lengths begins, and (last) where the last one ends."""
    return array("q", accumulate(lengths, initial=0))


def column_max(column: array[int]) -> int:
    """The largest code of a column of them (typecode "I"), 0 when it is empty: in C where the extension
    is built (a snapshot's postings hold millions, which max() would box one by one)."""
    if speedups is not None:
        found: int = speedups.max_u32(column)
        return found
    return max(column, default=0)


def _column(typecode: str, blob: Any) -> array[int]:
    column = array(typecode)
    column.frombytes(blob)  # (a memoryview into the snapshot: read once, into the array)
    return column
