"""The text index's vocabulary (text_index.py): each term the index holds, with a small int id that its
posting is kept under (postings.py), the ids of terms that left reused; lookups by term, the terms in
order for prefixes and for the snapshot.

Two implementations with one behaviour: the C extension's `Vocabulary` (mnemo/_speedups.c), which keeps
the terms' UTF-8 back to back in one arena with a hash table of ids over it (a few dozen bytes a term,
where a dict of str takes well over a hundred) and zeroes the bytes of a term that leaves; and
`PyVocabulary` below, its pure-Python twin, a dict and a list. They are tested against each other and a
model (tests/storage/file/test_vocabulary.py) and fuzzed (tools/fuzz_native.py --target vocabulary).
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Iterable
from typing import Any, Protocol

from ..._native import speedups


class Vocabulary(Protocol):
    def ids(self, terms: Iterable[str]) -> list[int | None]:
        """Each term's id (None: not held), in order."""

    def get(self, term: str) -> int | None:
        """The term's id, if it is held."""

    def add(self, term: str) -> int:
        """A new term's id: one that a term that left had, else the next unused. Precondition: the term
        is not held (ValueError if it is)."""

    def drop(self, tid: int) -> None:
        """The term of id `tid` leaves (its id is free for the next new term). Precondition: `tid` is
        held (ValueError if not)."""

    def term(self, tid: int) -> str | None:
        """The term of id `tid` (None: free, or never used)."""

    def id_space(self) -> int:
        """A bound on the ids: every id held is below it."""

    def ordered(self) -> list[int]:
        """The ids of the terms held, in the order of their terms."""

    def expand(self, prefix: str) -> list[str]:
        """Every term held that starts with `prefix`, in order."""

    def nbytes(self) -> int:
        """About how much memory it takes."""

    def __contains__(self, term: object) -> bool: ...


def new_vocabulary() -> Vocabulary:
    """An empty vocabulary: the C extension's where it is built, else the twin."""
    if _NATIVE is not None:
        found: Vocabulary = _NATIVE()
        return found
    return PyVocabulary()


def load_vocabulary(terms: list[str]) -> Vocabulary:
    """A vocabulary of `terms` (a snapshot's: distinct str in increasing order), each term's id its
    position. ValueError when a term repeats; the C extension's also when they are out of order, or
    hold a lone surrogate (the twin does not look: a forged snapshot is named by verify either way)."""
    if _NATIVE is not None:
        found: Vocabulary = _NATIVE.load(terms)
        return found
    return PyVocabulary.load(terms)


class PyVocabulary:
    """The twin: a dict of term -> id, a list of id -> term, the free ids, and a sorted list of the terms
    brought up to date only when prefixes are expanded."""

    def __init__(self) -> None:
        self.term_ids: dict[str, int] = {}
        self.terms: list[str | None] = []  # id -> term (None: free)
        self.free: list[int] = []
        self.sorted_terms: list[str] = []  # for prefixes; may lack new_terms and hold terms gone
        self.new_terms: list[str] = []
        self.gone_terms = 0

    @classmethod
    def load(cls, terms: list[str]) -> PyVocabulary:
        found = cls()
        found.terms = list(terms)
        found.term_ids = dict(zip(terms, range(len(terms)), strict=True))
        if len(found.term_ids) != len(terms):
            raise ValueError("the vocabulary names a term twice")
        found.sorted_terms = list(terms)
        return found

    def ids(self, terms: Iterable[str]) -> list[int | None]:
        return list(map(self.term_ids.get, terms))

    def get(self, term: str) -> int | None:
        return self.term_ids.get(term)

    def add(self, term: str) -> int:
        if term in self.term_ids:
            raise ValueError(f"the term {term!r} is held already")
        if self.free:
            tid = self.free.pop()
            self.terms[tid] = term
        else:
            tid = len(self.terms)
            self.terms.append(term)
        self.term_ids[term] = tid
        self.new_terms.append(term)
        return tid

    def drop(self, tid: int) -> None:
        term = self.term(tid)
        if term is None:
            raise ValueError(f"no term has the id {tid}")
        del self.term_ids[term]
        self.terms[tid] = None
        self.free.append(tid)
        self.gone_terms += 1

    def term(self, tid: int) -> str | None:
        return self.terms[tid] if 0 <= tid < len(self.terms) else None

    def id_space(self) -> int:
        return len(self.terms)

    def ordered(self) -> list[int]:
        return [self.term_ids[t] for t in sorted(self.term_ids)]

    def expand(self, prefix: str) -> list[str]:
        if self.new_terms or self.gone_terms > len(self.sorted_terms) // 4:
            known = self.term_ids
            merged = [t for t in self.sorted_terms if t in known] if self.gone_terms else self.sorted_terms
            merged.extend(self.new_terms)
            merged.sort()
            # (a term that left and came back is there twice: once)
            self.sorted_terms, self.new_terms, self.gone_terms = list(dict.fromkeys(merged)), [], 0
        ordered = self.sorted_terms
        out = []
        for i in range(bisect.bisect_left(ordered, prefix), len(ordered)):
            term = ordered[i]
            if not term.startswith(prefix):
                break
            if term in self.term_ids:
                out.append(term)
        return out

    def nbytes(self) -> int:
        size = sys.getsizeof  # (a report for the benchmarks: no behaviour reads it)
        held = size(self.term_ids) + sum(map(size, self.term_ids))  # pragma: no mutate
        lists = size(self.terms) + size(self.sorted_terms) + size(self.new_terms)  # pragma: no mutate
        return held + lists + size(self.free)  # pragma: no mutate

    def __contains__(self, term: object) -> bool:
        return term in self.term_ids


_NATIVE: Any = getattr(speedups, "Vocabulary", None)
