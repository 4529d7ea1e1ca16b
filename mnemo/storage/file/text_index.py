"""Recall's index in the file backend: the terms of each live record's latest version whose content is
text, kept in memory beside the index (index.py) and in its snapshot.

A document is one indexed version, numbered in the order documents were made; its number never changes,
so the postings need no renumbering when the index's rows are (a snapshot orders rows by id). Each
document knows its row, scope and length, and the distinct terms it holds (so that it leaves every
posting when its record is updated or forgotten, even when its text can no longer be read). Each term
has one posting: documents in increasing order, with how often each holds the term (postings.py keeps
both, compressed by the C extension). Each scope keeps
its number of documents and their total length, so that the statistics of any set of scopes are sums.

The index learns of a change from the index's rows: a forgotten or replaced version leaves at once (its
record's `drop` or `put`); a new version is indexed when recall next reads the index, or before a
snapshot is written (its text is read from the log then), so that writes pay nothing for a search they
may never need. Nothing of a document that left is kept: its terms leave the vocabulary when no other
document holds them.
"""

from __future__ import annotations

import sys
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import compress
from typing import Any

from ..._native import speedups
from ...recall.analysis import Seen, counted
from ...recall.engine import Column, norm
from .postings import CODE as _CODE
from .postings import PostingStore, ScopeMask, load_postings, new_postings
from .vocabulary import Vocabulary, load_vocabulary, new_vocabulary

TEXT_LAYOUT = 2
_ROW = "i"
"""The typecode of rows and documents in memory (i32: an index holds fewer than 2**31 rows)."""
TRIM_AFTER = 10_000
"""A catch-up of this many rows or more gives back the room the postings kept for growth."""
CATCH_UP_CHUNK = 256
FEW_ROWS = 8
"""A catch-up of more rows than FEW_ROWS reads CATCH_UP_CHUNK of them (or takes them from the held texts)
before it indexes them, each run of ASCII texts in one call (add_many); of fewer, a row at a time (add)."""
HELD_CHARS = 8_000_000
"""The most characters of text written by this process that pending rows keep for the catch-up."""


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
        self.vocab: Vocabulary = new_vocabulary()  # term <-> term id (vocabulary.py)
        # term id -> its documents and how often each holds it; document -> its term ids (postings.py)
        self.store: PostingStore = new_postings()
        self.doc_row = array(_ROW)  # document -> its record's row (-1: the document left)
        self.doc_scope = array("I")  # document -> scope code (the index's Interned scopes)
        self.doc_len = array("I")  # document -> number of terms
        self.doc_seq = array("q")  # document -> the seq of the version it is
        self._norms: tuple[float, array[float]] | None = None  # (avgdl, each document's norm), see norms
        self.row_docs = array(_ROW)  # row -> its document (-1: none; rows past its end have none)
        self.scope_totals: dict[int, list[int]] = {}  # scope code -> [documents, total length]
        self.pending: set[int] = set()  # rows whose latest version is not indexed yet
        # pending rows whose (scope code, seq, text) this process wrote, up to HELD_CHARS in all (see hold)
        self.held: dict[int, tuple[int, int, str | None]] = {}
        self.held_chars = 0

    def doc_of(self, row: int) -> int | None:
        """The document of row `row`, if it has one."""
        docs = self.row_docs
        doc = docs[row] if 0 <= row < len(docs) else -1
        return None if doc < 0 else doc

    # -- what the index's rows tell it -------------------------------------------------------------
    def hold(self, row: int, scope: int, seq: int, text: str | None) -> None:
        """Row `row`'s latest version, pending, is `seq`, whose text (None: not text) this process wrote:
        the catch-up takes it from here instead of reading it back from the log, while they hold
        HELD_CHARS or less in all (writes that recall never follows keep no more than that). Whatever
        makes the row change or leave drops it, so that nothing of a forgotten text stays."""
        size = len(text or "")
        if row in self.pending and self.held_chars + size <= HELD_CHARS:
            self._let_go(row)
            self.held[row] = (scope, seq, text)
            self.held_chars += size

    def hold_many(self, rows: Sequence[int], scopes: Sequence[int], seqs: Sequence[int],
                  texts: Sequence[str | None]) -> None:
        """hold(row, scope, seq, text) of each, in order (a transaction's new rows). In bulk when the rows
        are distinct, pending and not held, and all their texts fit (what the loop would do then), else
        in one loop."""
        pending, kept, chars = self.pending, self.held, self.held_chars
        total = sum(map(len, filter(None, texts)))
        if chars + total <= HELD_CHARS and pending.issuperset(rows) and kept.keys().isdisjoint(rows) \
                and (type(rows) is range or len(set(rows)) == len(rows)):
            kept.update(zip(rows, zip(scopes, seqs, texts, strict=True), strict=True))
            self.held_chars = chars + total
            return
        for row, scope, seq, text in zip(rows, scopes, seqs, texts, strict=True):
            size = len(text or "")
            if row in pending and chars + size <= HELD_CHARS:
                found = kept.pop(row, None)
                if found is not None:
                    chars -= len(found[2] or "")
                kept[row] = (scope, seq, text)
                chars += size
        self.held_chars = chars

    def _let_go(self, row: int) -> None:
        found = self.held.pop(row, None)
        if found is not None:
            self.held_chars -= len(found[2] or "")

    def remove_row(self, row: int) -> None:
        """Row `row`'s record was forgotten (or replaced): its document leaves every structure."""
        self.pending.discard(row)
        self._let_go(row)
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
        for tid in self.store.remove(doc):
            self.vocab.drop(tid)  # (no other document holds it: the term leaves the vocabulary)
        self.doc_row[doc] = -1
        self.doc_len[doc] = 0
        self.doc_scope[doc] = 0
        self._norms = None  # (which held the departed document's norm; the average changed anyway)

    def add(self, row: int, scope: int, text: str, seq: int, seen: Seen | None = None) -> None:
        """Index `text`, written by the entry `seq`, as row `row`'s document, in scope code `scope`
        (`seen`: the words analysed so far in this batch, analysis.analyse). Precondition: the row has
        none."""
        doc = len(self.doc_row)
        store = self.store
        # an ASCII text is analysed, looked up and posted in one call (in C where it is built); the
        # rest is analysed here, its terms looked up one by one
        length = store.add_text(doc, self.vocab, text, seen)
        if length is None:
            length, counts = counted(text, seen)
            vocab = self.vocab
            tids = [vocab.add(term) if tid is None else tid
                    for term, tid in zip(counts, vocab.ids(counts), strict=True)]
            store.add(doc, tids, list(counts.values()))
        self.doc_row.append(row)
        self.doc_scope.append(scope)
        self.doc_len.append(length)
        self.doc_seq.append(seq)
        self._norms = None
        self._place(doc, row, scope, length)

    def add_many(self, rows: Sequence[int], found: Sequence[tuple[int, int, str | None]], seen: Seen) -> None:
        """add(row, scope, text, seq, seen) of each row and its (scope code, seq, text), in order, a row
        whose text is None left out: each run of ASCII texts in one call of the postings (add_texts)."""
        i, n = 0, len(rows)
        while i < n:
            j = i
            while j < n and found[j][2] is not None:
                j += 1
            if j > i:
                texts = [f[2] for f in found[i:j]]
                lengths = self.store.add_texts(len(self.doc_row), self.vocab, texts)  # type: ignore[arg-type]
                k = i + len(lengths)
                if k > i:
                    run = found[i:k]
                    self._added(rows[i:k], [f[0] for f in run], lengths, [f[1] for f in run])
                if k < j:  # a text that is not ASCII: analysed here
                    scope, seq, text = found[k]
                    assert text is not None
                    self.add(rows[k], scope, text, seq, seen)
                    k += 1
                i = k
            else:
                i += 1

    def _added(self, rows: Sequence[int], scopes: Sequence[int], lengths: Sequence[int], seqs: Sequence[int]) -> None:
        """The documents just added to the postings for `rows` (the next documents, in order), with their
        scope codes, lengths and seqs, in the index's columns and totals."""
        first = len(self.doc_row)
        self.doc_row.extend(rows)
        self.doc_scope.extend(scopes)
        self.doc_len.extend(lengths)
        self.doc_seq.extend(seqs)
        self._norms = None
        place = self._place
        for doc, row, scope, length in zip(range(first, first + len(rows)), rows, scopes, lengths, strict=True):
            place(doc, row, scope, length)

    def _place(self, doc: int, row: int, scope: int, length: int) -> None:
        """Document `doc` (just added) as row `row`'s, counted in its scope's totals."""
        docs = self.row_docs
        if row == len(docs):  # (a new row, the usual case: the next one)
            docs.append(doc)
        else:
            if row > len(docs):
                docs.extend(array(_ROW, [-1]) * (row + 1 - len(docs)))
            docs[row] = doc
        totals = self.scope_totals.get(scope)
        if totals is None:
            self.scope_totals[scope] = [1, length]
        else:
            totals[0] += 1
            totals[1] += length

    def catch_up(self, read: Callable[[int], tuple[int, int, str | None]]) -> None:
        """Index every pending row: `read(row)` gives its scope code, and the seq and searchable text of
        its latest version (None: not text, so not indexed). Rows are indexed in row order."""
        seen: Seen = {}  # this catch-up's words, dropped with it
        held, pending = self.held, self.pending
        count = len(pending)
        rows = sorted(pending) if count > 1 else list(pending)
        if count <= FEW_ROWS:  # (a catch-up after a write or a few: one call each costs less than a run)
            for row in rows:
                kept = held.pop(row, None)
                scope, seq, text = read(row) if kept is None else kept
                pending.discard(row)
                if text is not None:
                    self.add(row, scope, text, seq, seen)
        else:
            for start in range(0, count, CATCH_UP_CHUNK):
                chunk = rows[start:start + CATCH_UP_CHUNK]
                found = [read(row) if (kept := held.pop(row, None)) is None else kept for row in chunk]
                pending.difference_update(chunk)
                self.add_many(chunk, found, seen)
        if count >= TRIM_AFTER:  # a bulk catch-up: the room its growth kept is given back
            self.store.trim()
        # emptied in place: clear() gives back the table that discard() keeps (a catch-up of a million rows,
        # 40 MB), and a catch-up after each write makes no new set and dict
        pending.clear()
        held.clear()
        self.held_chars = 0

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

    def scope_mask(self, scopes: set[int] | None) -> ScopeMask | None:
        """What `postings` takes to keep the documents of `scopes` (None: any)."""
        if scopes is None:
            return None
        codes = max(self.scope_totals, default=-1) + 1
        return self.doc_scope, bytes(code in scopes for code in range(codes))

    def postings(self, term: str, mask: ScopeMask | None) -> dict[int, int]:
        """Documents holding `term` (those `mask` keeps, see scope_mask; None: any) -> how often."""
        tid = self.vocab.get(term)
        return {} if tid is None else self.store.get(tid, mask)

    def expand(self, prefix: str) -> Iterator[str]:
        """Every term starting with `prefix`, in order (the sorted list is brought up to date first)."""
        return iter(self.vocab.expand(prefix))

    # -- the snapshot ------------------------------------------------------------------------------
    def to_state(self, renumber: Callable[[int], int] | None) -> dict[str, Any]:
        """The index as plain data, its rows renumbered by `renumber` (old row -> new row; None: kept),
        with documents, terms and postings made dense, so nothing of a document that left is written.
        Rows not indexed yet are listed as such: a snapshot never waits for their text to be read."""
        live = [doc for doc in range(len(self.doc_row)) if self.doc_row[doc] >= 0]
        dense = array("q", [-1]) * len(self.doc_row)
        for new, doc in enumerate(live):
            dense[doc] = new
        vocab = self.vocab
        order = vocab.ordered()
        term_order = [vocab.term(tid) for tid in order]
        new_tid = array("q", [-1]) * vocab.id_space()
        for new, tid in enumerate(order):
            new_tid[tid] = new
        rows = array("q", (self.doc_row[d] for d in live))
        pending = array("q", sorted(self.pending))
        if renumber is not None:
            rows = array("q", map(renumber, rows))
            pending = array("q", sorted(map(renumber, pending)))
        post_lens, post_docs, post_freqs, doc_term_lens, doc_terms = self.store.export(order, dense, live, new_tid)
        freq_bytes, freqs_blob = _narrowed(_column(_CODE, post_freqs))
        return {
            "layout": TEXT_LAYOUT,
            "byteorder": sys.byteorder,
            "terms": term_order,
            "post_lens": post_lens,
            "post_docs": post_docs,
            "freq_bytes": freq_bytes,
            "post_freqs": freqs_blob,
            "doc_row": rows.tobytes(),
            "doc_scope": array(_CODE, (self.doc_scope[d] for d in live)).tobytes(),
            "doc_len": array(_CODE, (self.doc_len[d] for d in live)).tobytes(),
            "doc_seq": array("q", (self.doc_seq[d] for d in live)).tobytes(),
            "doc_term_lens": doc_term_lens,
            "doc_terms": doc_terms,
            "pending": pending.tobytes(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], rows: int, scopes: int) -> TextIndex:
        """An index from to_state()'s data, for an index of `rows` rows and `scopes` scope codes.
        ValueError (or KeyError, TypeError, IndexError) on anything inconsistent."""
        if state["layout"] not in (1, TEXT_LAYOUT) or state["byteorder"] != sys.byteorder:
            raise ValueError("text index of another layout or byte order")
        text = cls()
        terms = state["terms"]
        if not isinstance(terms, list) or set(map(type, terms)) - {str}:
            raise ValueError("text index terms are not strings")
        text.vocab = load_vocabulary(terms)
        text.doc_row = array(_ROW, _column("q", state["doc_row"]))  # (i64 in the snapshot)
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
        text.row_docs = array(_ROW, [-1]) * rows
        for doc, row in enumerate(text.doc_row):
            text.row_docs[row] = doc
        if text.row_docs.count(-1) != rows - n or any(text.row_docs[row] >= 0 for row in text.pending):
            raise ValueError("text index names a row twice")
        post_lens = _column(_CODE, state["post_lens"])
        post_docs = _column(_CODE, state["post_docs"])
        freq_bytes = state["freq_bytes"] if state["layout"] == TEXT_LAYOUT else 4  # (layout 1: all u32)
        if freq_bytes not in (1, 4):
            raise ValueError("text index frequencies of another width")
        post_freqs = _column("B" if freq_bytes == 1 else _CODE, state["post_freqs"])
        if len(post_lens) != len(terms) or len(post_docs) != sum(post_lens) or len(post_freqs) != len(post_docs):
            raise ValueError("text index postings do not match its terms")
        if post_docs and (column_max(post_docs) >= n or not min(post_lens)):
            raise ValueError("text index posting out of range")
        lens = _column(_CODE, state["doc_term_lens"])
        ids = _column(_CODE, state["doc_terms"])
        if len(lens) != n or len(ids) != sum(lens) or (ids and column_max(ids) >= len(terms)):
            raise ValueError("text index document terms do not match")
        text.store = load_postings(post_lens, post_docs, post_freqs, lens, ids)
        text.scope_totals = _scope_totals(text.doc_scope, text.doc_len)
        return text

    def describe(
        self, row_id: Callable[[int], str | None], scope_name: Callable[[int], str]
    ) -> dict[str | None, tuple[str, int, int, dict[str, int]]]:
        """Each document as (scope, length, seq, term -> frequency), by its record's id: what verify compares
        with an index built from the log. A document whose own list of terms disagrees with the postings
        is described with a length of -1, so that it never compares equal."""
        freq_of: dict[int, dict[int, int]] = {}
        for tid in range(self.vocab.id_space()):
            if self.vocab.term(tid) is not None:
                for doc, tf in self.store.get(tid, None).items():
                    freq_of.setdefault(doc, {})[tid] = tf
        out: dict[str | None, tuple[str, int, int, dict[str, int]]] = {}
        for doc, row in enumerate(self.doc_row):
            if row < 0:
                continue
            held = freq_of.get(doc, {})
            listed = set(self.store.tids(doc))
            length = self.doc_len[doc] if listed == set(held) else -1
            found = {self.vocab.term(t) or "": f for t, f in held.items()}
            out[row_id(row)] = (scope_name(self.doc_scope[doc]), length, self.doc_seq[doc], found)
        return out


class _Norms:
    """Documents' norms computed as they are asked for."""

    def __init__(self, lengths: array[int], avg: float) -> None:
        self.lengths, self.avg = lengths, avg

    def __getitem__(self, doc: int) -> float:
        return norm(self.lengths[doc], self.avg)


def _scope_totals(doc_scope: array[int], doc_len: array[int]) -> dict[int, list[int]]:
    """Each scope code's [number of documents, their total length]. With few scopes (the usual case) a
    pass over the columns per scope, in C (compress, sum), costs less than one pass in Python."""
    counts = Counter(doc_scope)
    if len(counts) <= 16:
        return {scope: [count, sum(compress(doc_len, map(scope.__eq__, doc_scope)))]
                for scope, count in counts.items()}
    totals = {scope: [count, 0] for scope, count in counts.items()}
    for scope, length in zip(doc_scope, doc_len, strict=True):
        totals[scope][1] += length
    return totals


def _narrowed(freqs: array[int]) -> tuple[int, bytes]:
    """Frequencies (typecode "I") as the snapshot keeps them: one byte each when every one fits (most
    terms occur a few times in a document: a quarter of the size to read, check and hold), else four;
    (bytes per frequency, the bytes)."""
    if column_max(freqs) > 0xFF:
        return 4, freqs.tobytes()
    low = 0 if sys.byteorder == "little" else 3  # the byte of each u32 that holds its value
    return 1, freqs.tobytes()[low::4]


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
