"""The Source recall reads the text index through (text_index.py): TableSource, over the rows of one
statement (sql.recall_sql), its columns decoded once, when first asked for; a phrase decided from the
positions read with its words' postings (text_phrases.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from ...recall._numpy import installed, np
from ...recall.bm25 import K1, B
from .text_index import native_column, unpack_places, unpacked
from .text_phrases import phrase_starts

if TYPE_CHECKING:
    from numpy.typing import NDArray


class IndexDisagrees(ValueError):
    """The text index's rows contradict themselves (terms held in a corpus whose totals say it holds no
    document, or no term): they were changed behind the store's back."""


BULK = 64
"""A recall whose postings number this many or more scores them in bulk (TableSource.bulk)."""


class TableSource:
    """A Source (mnemo.recall.engine; Packed too) over the rows of one read of the index (sql.recall_sql),
    all taken in one snapshot: the corpus's totals, the postings of the query's terms and of the terms its
    prefixes reach (with their documents' lengths), all in one row of packed columns, which of those
    documents have the tags asked for (`tagged`: None when no tags were asked for), and the documents of
    the records an open transaction changed (`touched`: id -> seq). A document is named by its seq; its
    text is read by `text(seq)` (for phrases). The columns are decoded once, when first asked for: as
    arrays by `columns` (numpy: each term's a slice of them), as a mapping per term by `postings`."""

    def __init__(self, rows: Iterable[tuple[Any, ...]], exact: Iterable[str], prefixes: Iterable[str],
                 filtered: bool, text: Callable[[int], str]) -> None:
        self.n_docs = self.total = 0
        self._lengths: dict[int, int] | None = None
        self._touched_lengths: dict[int, int] = {}
        self._tagged: bytes | None = b"" if filtered else None
        self.touched: dict[str, int] = {}
        self._spans: dict[str, tuple[int, int]] = {}  # each term's postings: where they start and end
        self._packed = (b"", b"", b"")  # every posting's seq, tf and length, packed
        self._arrays: tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]] | None = None
        self._postings: dict[str, dict[int, int]] = {}
        # the terms read with their positions: where their postings start and end (in the postings above);
        # every posting's positions, packed one after the other (pack_places), and once decoded, how many
        # each has, where each one's start among them, and all of them (None: they do not decode)
        self._positioned: dict[str, tuple[int, int]] = {}
        self._positions = b""
        self._decoded: tuple[_Starts, bytes, bytes] | None = None
        self._unpacked_yet = False
        self._first = 0  # the first posting read with positions
        self._phrases: dict[tuple[str, ...], tuple[dict[int, int], list[int], dict[int, int]]] = {}
        self.exact = frozenset(exact)
        self.prefixes = tuple(prefixes)
        self._text = text
        for kind, name, a, b, seqs, tfs, lengths, terms, counts, positions in rows:
            if kind == 1 or kind == 4:  # every term's postings (with their positions: the words of phrases)
                if terms is not None:
                    if kind == 4:
                        self._add_positions(terms, counts, positions)
                    self._add(terms, counts, seqs, tfs, lengths)
            elif kind == 0:
                self.n_docs, self.total = a, b
            elif kind == 2:
                if self._tagged is not None:
                    self._tagged = seqs
            else:
                self.touched[name] = a
                self._touched_lengths[a] = b
        if self._spans and (self.n_docs <= 0 or self.total <= 0):
            raise IndexDisagrees("terms are held by documents of a corpus counted as empty")
        self.bulk = len(self._packed[0]) // 8 >= BULK

    def sizes(self, exact: Iterable[str], prefixes: Iterable[str]) -> dict[str, int]:
        """How many postings were read of each of the `exact` terms and of each of the `prefixes` (all its
        terms', keyed "prefix*")."""
        out = {term: self._size(term) for term in exact}
        for prefix in prefixes:
            out[prefix + "*"] = sum(self._size(term) for term in self._spans if term.startswith(prefix))
        return out

    def _size(self, term: str) -> int:
        start, end = self._spans.get(term, (0, 0))
        return end - start

    def _add(self, terms: list[str], counts: bytes, seqs: bytes, tfs: bytes, lengths: bytes) -> None:
        n = len(seqs) // 8
        sizes = unpacked(counts, 4)
        if len(sizes) != len(terms) or sum(sizes) != n or len(tfs) != 4 * n or len(lengths) != 4 * n:
            raise IndexDisagrees("the postings read do not add up")  # (no row can make them: the statement's)
        at = len(self._packed[0]) // 8
        for term, size in zip(terms, sizes, strict=True):
            self._spans[term] = (at, at + size)
            at += size
        self._packed = (self._packed[0] + seqs, self._packed[1] + tfs, self._packed[2] + lengths)

    def _add_positions(self, terms: list[str], counts: bytes, positions: bytes) -> None:
        """The positions of the postings _add adds next (one row of them: the statement sends one)."""
        self._first = len(self._packed[0]) // 8
        self._positions = positions
        at = 0
        for term, size in zip(terms, unpacked(counts, 4), strict=True):
            self._positioned[term] = (self._first + at, self._first + at + size)
            at += size

    def _unpacked(self) -> tuple[_Starts, bytes, bytes] | None:
        """Every posting's positions decoded (once): where each one's start among all of them (and where
        the last one's end), how many each has (-1: not kept) and all of them, the last two as columns of
        native 32-bit integers; None when they do not decode (rows written by hand)."""
        if not self._unpacked_yet:
            self._unpacked_yet = True
            postings = sum(end - start for start, end in self._positioned.values())
            found = unpack_places(self._positions, postings)
            if found is not None:
                counts, places = found
                ends: Sequence[int] | NDArray[np.int64]
                if installed():  # (left an array: _places reads two of its numbers an atom)
                    ends = np.cumsum(np.maximum(np.frombuffer(counts, dtype=np.int32), 0))
                else:
                    ends = list(accumulate(max(0, n) for n in native_column(counts)))
                self._decoded = (_Starts(ends), counts, places)
        return self._decoded

    def phrase(self, atoms: tuple[str, ...]) -> tuple[dict[int, int], list[int], dict[int, int]] | None:
        """engine.Positional's: where the phrase starts, from the positions of its atoms read with their
        postings; None if one of them was not read with its positions."""
        decided = self._phrases.get(atoms)
        if decided is None:
            if not all(atom in self._positioned or atom not in self._spans for atom in atoms):
                return None
            if any(atom not in self._spans for atom in atoms):
                decided = {}, [], {}  # a word of it no document holds
            else:
                if self._unpacked() is None:
                    return None  # positions no writer gives (rows written by hand): the texts say
                per_atom = {atom: self._places(atom) for atom in dict.fromkeys(atoms)}
                decided = phrase_starts(atoms, per_atom)
            self._phrases[atoms] = decided
        return dict(decided[0]), list(decided[1]), decided[2]  # (the first the caller's to add to)

    def _places(self, atom: str) -> tuple[bytes, bytes, bytes, bytes]:
        """The seqs of an atom's postings and their documents' lengths (packed, big-endian), how many
        positions each has (-1: none kept) and all of them (native 32-bit integers). Precondition: the
        positions decode (_unpacked)."""
        start, end = self._positioned[atom]
        decoded = self._unpacked()
        assert decoded is not None
        offsets, counts, places = decoded
        first, last = start - self._first, end - self._first
        return (self._packed[0][8 * start:8 * end], counts[4 * first:4 * last],
                places[4 * offsets[first]:4 * offsets[last]], self._packed[2][4 * start:4 * end])

    @property
    def tagged(self) -> set[int] | None:
        """The documents of the postings read that have the tags asked for (None: none were asked for)."""
        if self._tagged is None:
            return None
        return set(unpacked(self._tagged, 8))

    def totals(self) -> tuple[int, int]:
        return self.n_docs, self.total

    def _check(self, term: str) -> None:
        if term not in self.exact and not term.startswith(self.prefixes):
            raise LookupError(f"the postings of {term!r} were not read")  # the read names every term recall asks for

    def postings(self, term: str) -> dict[int, int]:
        found = self._postings.get(term)
        if found is None:
            self._check(term)
            span = self._spans.get(term)
            if span is None:
                found = {}
            else:
                start, end = span
                seqs, tfs, _lengths = self._packed
                found = dict(zip(unpacked(seqs[8 * start:8 * end], 8), unpacked(tfs[4 * start:4 * end], 4),
                                 strict=True))
            self._postings[term] = found
        return found

    def columns(self, term: str) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
        span = self._spans.get(term)
        if span is None:  # (a term with postings was read: only one without is checked, as a prefix's are many)
            self._check(term)
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        if self._arrays is None:
            seqs, tfs, lengths = self._packed
            self._arrays = (np.frombuffer(seqs, dtype=">i8").astype(np.int64),
                            np.frombuffer(tfs, dtype=">i4").astype(np.int64),
                            np.frombuffer(lengths, dtype=">i4").astype(np.int64))
        start, end = span
        keys, tfs_, lengths_ = self._arrays
        return keys[start:end], tfs_[start:end], lengths_[start:end]

    def expand(self, prefix: str) -> list[str]:
        if prefix not in self.prefixes:
            raise LookupError(f"the terms of prefix {prefix!r} were not read")
        return sorted(term for term in self._spans if term.startswith(prefix))

    def lengths(self) -> dict[int, int]:
        if self._lengths is None:
            seqs, _tfs, lengths = self._packed
            self._lengths = dict(zip(unpacked(seqs, 8), unpacked(lengths, 4), strict=True))
            self._lengths.update(self._touched_lengths)
        return self._lengths

    def norms(self, avg: float, wanted: int) -> dict[int, float]:
        k1, b, rest = K1, B, 1 - B  # norm(length, avg), inline: the same operations in the same order
        return {key: k1 * (rest + b * length / avg) for key, length in self.lengths().items()}

    def seqs(self) -> _Seqs:
        return _Seqs()

    def text(self, key: int) -> str:
        return self._text(key)


class _Starts:
    """Where each posting's positions start among all of them, from where each one's end (`ends`): 0, then
    `ends`, each an int."""

    def __init__(self, ends: Sequence[int] | NDArray[np.int64]) -> None:
        self._ends = ends

    def __getitem__(self, k: int, /) -> int:
        return int(self._ends[k - 1]) if k else 0


class _Seqs:
    """The seqs of documents named by their seqs."""

    def __getitem__(self, key: int, /) -> int:
        return key


__all__ = ["BULK", "IndexDisagrees", "TableSource"]
