"""The text index's postings (text_index.py): for each term id, the documents holding it, in increasing
order, with how often each does; for each document, the distinct term ids it holds, so that it can
leave every posting it is in.

Two implementations with one behaviour: the C extension's `Postings` (mnemo/_speedups.c), which keeps
both compressed (each posting as varint gaps and frequencies, in its slot when it takes 8 bytes or
less; each document's terms as varint gaps of its sorted term ids, back to back in one arena) and
zeroes the bytes a departing document leaves; and `PyPostings` below, its
pure-Python twin, which keeps arrays. They are tested against each other (tests/storage/file/
test_postings.py) and fuzzed (tools/fuzz_native.py --target postings); a snapshot either writes is the
same bytes, and either reads what the other wrote.

Documents are numbered from 0 in the order they are added; a term id is any small int the caller
assigns (it reuses the id of a term whose posting emptied).
"""

from __future__ import annotations

import bisect
import sys
from array import array
from collections.abc import Sequence
from itertools import accumulate
from typing import Any, Protocol, TypeAlias

from ..._native import speedups
from ...recall.analysis import Seen, terms
from .vocabulary import Vocabulary

CODE = "I"
"""The typecode of document numbers, term ids and frequencies as a snapshot keeps them (u32)."""

ScopeMask: TypeAlias = tuple["array[int]", bytes]
"""Which documents a read keeps: (each document's scope code, a byte per scope code: nonzero kept; a
code past its end is not kept)."""


class PostingStore(Protocol):
    def add(self, doc: int, tids: Sequence[int], tfs: Sequence[int]) -> None:
        """Document `doc` holds term `tids[i]` `tfs[i]` times (each > 0). Preconditions: `doc` is the
        number of documents added so far; the tids are distinct."""

    def add_text(self, doc: int, vocab: Vocabulary, text: str, seen: Seen | None = None) -> int | None:
        """An ASCII `text` indexed as document `doc` in one call: its terms (recall.analysis.terms), each
        one's id in `vocab` (the terms it lacks added, in the order they first occur), and the document
        added as `add` adds it; the document's length (its number of terms). None, changing nothing, for
        a text that is not ASCII (the caller analyses it). ValueError, changing nothing, when `doc` is
        not the next document. `seen`: the words analysed so far in a batch (analysis.analyse), which
        the twin's analysis uses; the C extension's takes only its own Vocabulary, and needs no `seen`."""

    def add_texts(self, doc: int, vocab: Vocabulary, texts: list[str]) -> list[int]:
        """add_text of each text as the documents doc, doc + 1, ... in one call: their lengths, up to the
        first text that is not ASCII (which, and every text after it, is left to the caller). An error
        after some texts were added returns their lengths (the failing text, added alone, raises it)."""

    def remove(self, doc: int) -> list[int]:
        """Document `doc` leaves every posting it is in (and holds no term after); the term ids whose
        postings it left empty. A document removed before, or never added, holds none."""

    def count(self, tid: int) -> int:
        """How many documents hold term `tid` (0 for an id never used)."""

    def get(self, tid: int, mask: ScopeMask | None) -> dict[int, int]:
        """The documents holding term `tid` (those `mask` keeps; None: all) -> how often."""

    def tids(self, doc: int) -> list[int]:
        """The distinct term ids document `doc` holds, in increasing order."""

    def export(self, order: Sequence[int], dense: array[int], live: Sequence[int],
               new_tid: array[int]) -> tuple[bytes, bytes, bytes, bytes, bytes]:
        """The snapshot's columns (u32, back to back), documents and term ids renumbered: for each
        term id of `order`, its posting's length, documents (`dense[doc]`) and frequencies; for each
        document of `live`, its number of terms and its term ids (`new_tid[tid]`, increasing).
        Precondition: `dense` maps every document of a posting, increasingly; `new_tid` every term id
        of a live document."""

    def nbytes(self) -> int:
        """About how much memory the postings and term lists take."""

    def trim(self) -> None:
        """Gives back the room kept for growth (after many documents were added at once)."""


def new_postings() -> PostingStore:
    """Empty postings: the C extension's where it is built, else the twin."""
    if _NATIVE is not None:
        store: PostingStore = _NATIVE()
        return store
    return PyPostings()


def load_postings(post_lens: array[int], post_docs: array[int], post_freqs: array[int],
                  doc_term_lens: array[int], doc_terms: array[int]) -> PostingStore:
    """Postings from a snapshot's columns (text_index.TextIndex.from_state): term id i's posting is the
    i-th run of `post_lens` in `post_docs` and `post_freqs` (typecode "I", or "B" for frequencies), and
    document d's term ids the d-th run of `doc_term_lens` in `doc_terms`. Precondition (checked by the
    caller): the runs fill the columns exactly, every document is below `len(doc_term_lens)` and every
    term id below `len(post_lens)`. ValueError when a frequency is 0; the C extension's also when a
    posting's documents or a document's term ids are not in increasing order (the twin does not look:
    a million comparisons in Python would cost more than the load; verify compares the whole index
    with one built from the log, so a forged snapshot is named there either way)."""
    if _NATIVE is not None:
        store: PostingStore = _NATIVE.load(post_lens, post_docs, post_freqs, doc_term_lens, doc_terms)
        return store
    return PyPostings.load(post_lens, post_docs, post_freqs, doc_term_lens, doc_terms)


class PyPostings:
    """The twin: an array of documents and one of frequencies per term, a packed array of term ids per
    document. Loaded from a snapshot, it keeps the snapshot's columns and slices a term's or a
    document's run out when first used (an open of a million documents must not make millions of
    arrays), zeroing it in the columns when it is taken to be changed, so that nothing of a document
    that leaves stays there."""

    def __init__(self) -> None:
        # term id -> its documents and frequencies (None: still in _loaded, see _posting)
        self.docs: list[array[int] | None] = []
        self.freqs: list[array[int] | None] = []
        # document -> its term ids, packed (b"": it left; None: in _loaded, see tids)
        self.doc_terms: list[bytes | None] = []
        # the snapshot's columns, with where each term's and document's run begins
        self._loaded: tuple[array[int], array[int], array[int], array[int], array[int]] | None = None

    @classmethod
    def load(cls, post_lens: array[int], post_docs: array[int], post_freqs: array[int],
             doc_term_lens: array[int], doc_terms: array[int]) -> PyPostings:
        """See load_postings."""
        store = cls()
        post_starts, doc_starts = _starts(post_lens), _starts(doc_term_lens)
        if 0 in post_freqs:
            raise ValueError("a posting holds a frequency of 0")
        store.docs = [None] * len(post_lens)
        store.freqs = [None] * len(post_lens)
        store.doc_terms = [None] * len(doc_term_lens)
        store._loaded = (post_docs, post_freqs, post_starts, doc_terms, doc_starts)
        return store

    def _posting(self, tid: int, keep: bool) -> tuple[array[int], array[int]]:
        """Term `tid`'s documents and frequencies, taken out of the snapshot's columns if still there
        (and kept, with `keep`, so that a change to them stays)."""
        if tid >= len(self.docs):
            return array(CODE), array(CODE)
        docs, freqs = self.docs[tid], self.freqs[tid]
        if docs is not None and freqs is not None:
            return docs, freqs
        assert self._loaded is not None  # a term id with no arrays was loaded from a snapshot
        all_docs, all_freqs, starts = self._loaded[0], self._loaded[1], self._loaded[2]
        first, end = starts[tid], starts[tid + 1]
        docs, freqs = all_docs[first:end], all_freqs[first:end]
        if keep:
            freqs = widened(freqs)  # (the snapshot's may be bytes, and a frequency may grow past 255)
            self.docs[tid], self.freqs[tid] = docs, freqs
            # what changes now changes in the copy: the loaded one is zeroed, so that it never keeps
            # a document that leaves
            all_docs[first:end] = array(CODE, bytes(4 * (end - first)))
            all_freqs[first:end] = array(all_freqs.typecode, bytes(all_freqs.itemsize * (end - first)))
        return docs, freqs

    def add(self, doc: int, tids: Sequence[int], tfs: Sequence[int]) -> None:
        assert doc == len(self.doc_terms)
        if len(tids) != len(tfs):
            raise ValueError("tids and tfs differ in length")
        top = max(tids, default=-1)
        while top >= len(self.docs):
            self.docs.append(array(CODE))
            self.freqs.append(array(CODE))
        all_docs, all_freqs = self.docs, self.freqs
        for tid, tf in zip(tids, tfs, strict=True):
            docs, freqs = all_docs[tid], all_freqs[tid]
            if docs is None or freqs is None:  # still in the snapshot's columns
                docs, freqs = self._posting(tid, keep=True)
            docs.append(doc)  # the newest document: the posting stays in order
            freqs.append(tf)
        self.doc_terms.append(array(CODE, sorted(tids)).tobytes())

    def add_texts(self, doc: int, vocab: Vocabulary, texts: list[str]) -> list[int]:
        lengths: list[int] = []
        for k, text in enumerate(texts):
            try:
                length = self.add_text(doc + k, vocab, text)
            except Exception:  # as the extension: what was added is returned, the failing text raises alone
                if lengths:
                    return lengths
                raise
            if length is None:
                break
            lengths.append(length)
        return lengths

    def add_text(self, doc: int, vocab: Vocabulary, text: str, seen: Seen | None = None) -> int | None:
        if doc != len(self.doc_terms):
            raise ValueError(f"the next document is {len(self.doc_terms)}, not {doc}")
        if not text.isascii():
            return None
        found = terms(text, seen)
        counts: dict[str, int] = {}
        for term in found:
            counts[term] = counts.get(term, 0) + 1
        tids = [vocab.add(term) if tid is None else tid for term, tid in zip(counts, vocab.ids(counts), strict=True)]
        self.add(doc, tids, list(counts.values()))
        return len(found)

    def remove(self, doc: int) -> list[int]:
        if doc >= len(self.doc_terms):
            return []
        listed = self.tids(doc)
        if self.doc_terms[doc] is None and self._loaded is not None:  # zeroed in the loaded lists too
            ids, starts = self._loaded[3], self._loaded[4]
            ids[starts[doc]:starts[doc + 1]] = array(CODE, bytes(4 * len(listed)))
        self.doc_terms[doc] = b""
        emptied = []
        for tid in listed:
            docs, freqs = self._posting(tid, keep=True)
            i = bisect.bisect_left(docs, doc)
            if i < len(docs) and docs[i] == doc:
                del docs[i]
                del freqs[i]
            if not docs:
                emptied.append(tid)
        return emptied

    def count(self, tid: int) -> int:
        if tid >= len(self.docs):
            return 0
        docs = self.docs[tid]
        if docs is not None:
            return len(docs)
        assert self._loaded is not None
        starts = self._loaded[2]
        return starts[tid + 1] - starts[tid]

    def get(self, tid: int, mask: ScopeMask | None) -> dict[int, int]:
        docs, freqs = self._posting(tid, keep=False)
        if mask is None:
            return dict(zip(docs, freqs, strict=True))
        scope_of, allowed = mask
        codes = len(allowed)
        return {doc: tf for doc, tf in zip(docs, freqs, strict=True)
                if scope_of[doc] < codes and allowed[scope_of[doc]]}

    def tids(self, doc: int) -> list[int]:
        if doc >= len(self.doc_terms):
            return []
        listed = self.doc_terms[doc]
        if listed is not None:
            found_ids: list[int] = array(CODE, listed).tolist()
            return found_ids
        assert self._loaded is not None  # a document with no list was loaded from a snapshot
        ids, starts = self._loaded[3], self._loaded[4]
        found: list[int] = ids[starts[doc]:starts[doc + 1]].tolist()
        return found

    def export(self, order: Sequence[int], dense: array[int], live: Sequence[int],
               new_tid: array[int]) -> tuple[bytes, bytes, bytes, bytes, bytes]:
        post_docs, post_freqs, post_lens = array(CODE), array(CODE), array(CODE)
        for tid in order:
            docs, freqs = self._posting(tid, keep=False)
            post_docs.extend(map(dense.__getitem__, docs))
            post_freqs.extend(widened(freqs))
            post_lens.append(len(docs))
        doc_terms, doc_term_lens = array(CODE), array(CODE)
        for doc in live:
            ids = sorted(map(new_tid.__getitem__, self.tids(doc)))
            doc_terms.extend(ids)
            doc_term_lens.append(len(ids))
        return (post_lens.tobytes(), post_docs.tobytes(), post_freqs.tobytes(), doc_term_lens.tobytes(),
                doc_terms.tobytes())

    def trim(self) -> None:
        pass  # (arrays keep little room; the C extension's buffers keep up to half again)

    def nbytes(self) -> int:  # (a report for the benchmarks: no behaviour reads it)
        size = _sizeof
        docs = sum(size(a) for a in self.docs if a is not None)  # pragma: no mutate
        freqs = sum(size(a) for a in self.freqs if a is not None)  # pragma: no mutate
        packed = sum(size(b) for b in self.doc_terms if b is not None)  # pragma: no mutate
        loaded = sum(size(a) for a in self._loaded) if self._loaded is not None else 0  # pragma: no mutate
        lists = size(self.docs) + size(self.freqs) + size(self.doc_terms)  # pragma: no mutate
        return lists + docs + freqs + packed + loaded  # pragma: no mutate


def widened(freqs: array[int]) -> array[int]:
    """Frequencies as typecode "I", from a snapshot's bytes (typecode "B") or as they are."""
    if freqs.typecode == CODE:
        return freqs
    wide = bytearray(4 * len(freqs))
    wide[0 if sys.byteorder == "little" else 3::4] = freqs.tobytes()
    out = array(CODE)
    out.frombytes(wide)
    return out


def _starts(lengths: array[int]) -> array[int]:
    """Where each of back-to-back runs of these lengths begins, and (last) where the last one ends."""
    return array("q", accumulate(lengths, initial=0))


_sizeof = sys.getsizeof
_NATIVE: Any = getattr(speedups, "Postings", None)
