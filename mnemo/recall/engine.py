"""Recall over an index a backend keeps: a query's clauses turned into features, their documents read
from a Source, phrases checked against the documents' text, excluded clauses applied, and the matches
ranked by BM25 (bm25.py) over the Source's corpus.

A Source is one backend's index seen through one caller's eyes: its corpus is exactly the documents
that caller may search (docs/RECALL.md §4), so every statistic, and so every score, depends on nothing
else. `Overlay` puts a transaction's own writes over a Source.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, cast, runtime_checkable

from ._numpy import installed, np
from .analysis import atoms, counted, phrase_count
from .bm25 import K1, B, idf
from .query import Feature, Phrase, Prefix, Query, Term, occurrences

if TYPE_CHECKING:
    from numpy.typing import NDArray

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", contravariant=True)
V_co = TypeVar("V_co", covariant=True)
Postings = Mapping[K, int]


class Column(Protocol[K_contra, V_co]):
    """A value per document (a mapping, or an array indexed by document number)."""

    def __getitem__(self, key: K_contra, /) -> V_co: ...


def norm(length: int, avg: float) -> float:
    """k1 · (1 - b + b · |d| / avgdl), as bm25.saturation computes it: a Source's norms are these."""
    return K1 * (1 - B + B * length / avg)


class Source(Protocol[K]):
    """What recall reads of an index, over one corpus. A document is named by a key of the backend's
    choosing; every key a method returns is a document of the corpus."""

    def totals(self) -> tuple[int, int]:
        """(number of documents, sum of their lengths) of the corpus."""

    def postings(self, term: str) -> Postings[K]:
        """The documents of the corpus holding `term`, each with how often it does (>= 1)."""

    def expand(self, prefix: str) -> Iterable[str]:
        """At least every term starting with `prefix` that a document of the corpus holds (a term none
        holds may be among them: its postings are empty)."""

    def lengths(self) -> Column[K, int]:
        """Each document's length, its number of terms (analysis.terms), by key."""

    def norms(self, avg: float, wanted: int) -> Column[K, float]:
        """Each document's `norm(length, avg)`, for `wanted` postings to score (a backend may keep them
        for the next recall, or compute only those asked for when they are few)."""

    def seqs(self) -> Column[K, int]:
        """The seq of the entry that wrote each document (equal scores rank the highest first)."""

    def text(self, key: K) -> str:
        """A document's text, as it was analysed (for phrases)."""


@runtime_checkable
class Packed(Source[int], Protocol):
    """A Source (of keys that are the documents' seqs) that also gives a term's postings as columns, which
    search scores in bulk with numpy when it is installed and `bulk` says so."""

    bulk: bool
    """Whether its postings are many enough to be scored in bulk (search_packed): numpy's cost per call
    is more than the scoring of a few postings one by one (scored), which gives the same floats."""

    def columns(self, term: str) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
        """The postings of `term` (as Source.postings): the documents' seqs, how often each holds the
        term, and each one's length, in one order; each seq once."""


@runtime_checkable
class Positional(Protocol[K]):
    """A Source that also knows where its documents' terms stand among their atoms, for phrases."""

    def phrase(self, atoms: tuple[str, ...]) -> tuple[dict[K, int], list[K], Column[K, int]] | None:
        """How many times the phrase of `atoms` starts in each document of the corpus that holds every
        atom and whose positions of them are kept (only those where it does start), the documents
        holding every atom whose positions are not all kept (their text says), and the lengths of both;
        None when this source cannot tell (search then reads the text of every document holding every
        atom)."""


def search(
    query: Query, source: Source[K], limit: int, keep: Callable[[K], bool] | None = None
) -> list[tuple[K, float]]:
    """The `limit` best documents of `source` matching `query` (and `keep`, when given: a filter on the
    hits that leaves the corpus as it is), with their BM25 scores, best first, equal scores newest
    first. Each score equals bm25.score of the document's features over the corpus's statistics.
    Precondition: limit >= 0."""
    if limit == 0:
        return []
    # a Packed source of many postings (getattr: a check of the Protocol's every member costs more than a
    # rare word's scoring); its keys are seqs: K is int
    if getattr(source, "bulk", False) and installed():
        found = search_packed(query, cast("Packed", source), limit, cast("Callable[[int], bool] | None", keep))
        return cast("list[tuple[K, float]]", found)
    scores, excluded = scored(query, source)
    for key in excluded:
        scores.pop(key, None)
    if keep is not None:
        scores = {key: score for key, score in scores.items() if keep(key)}
    return _best(scores, limit, source.seqs())


def scored(query: Query, source: Source[K], include: bool = True) -> tuple[dict[K, float], set[K]]:
    """The BM25 score of every document of `source` matching one of `query`'s included clauses (none
    asked for without `include`), and the documents matching one of its excluded clauses (whose scores
    are among the first, computed as for any other)."""
    n_docs, total = source.totals()
    if n_docs == 0:
        return {}, set()
    phrase_starts = _phrase_counter(source)
    excluded: set[K] = set()
    for clause in query.exclude:
        for postings in _clause_postings(clause, source, phrase_starts).values():
            excluded.update(postings)
    features: dict[Feature, Postings[K]] = {}
    for clause in query.include if include else ():
        features.update(_clause_postings(clause, source, phrase_starts))
    if not features:
        return {}, excluded
    avg = total / n_docs
    norms = source.norms(avg, sum(map(len, features.values())))
    k1_plus_1 = K1 + 1
    scores: dict[K, float] = {}
    # Features in bm25.score's order, each document's terms summed from 0.0 in the same expression as
    # bm25.saturation, so that each score is the very float bm25.score gives.
    for _feature, postings in sorted(features.items(), key=lambda item: repr(item[0])):
        weight = idf(n_docs, len(postings))
        if not scores:
            scores = {
                key: weight * (tf * k1_plus_1 / (tf + norms[key])) for key, tf in postings.items()
            }
            continue
        get = scores.get
        for key, tf in postings.items():
            scores[key] = get(key, 0.0) + weight * (tf * k1_plus_1 / (tf + norms[key]))
    return scores, excluded


def _phrase_counter(source: Source[K]) -> Callable[[Phrase, K], int]:
    """phrase_starts(phrase, key): how many times `phrase` occurs in a document of `source` (its text read
    once per search)."""
    texts: dict[K, str] = {}
    analysed: dict[K, list[str]] = {}

    def phrase_starts(phrase: Phrase, key: K) -> int:
        text = texts.get(key)
        if text is None:
            text = texts[key] = source.text(key)
        found = phrase_count(text, phrase.atoms)
        if found is not None:
            return found
        positions = analysed.get(key)
        if positions is None:
            positions = analysed[key] = atoms(text)
        return occurrences(phrase, positions)

    return phrase_starts


Columns = tuple["NDArray[np.int64]", "NDArray[np.int64]", "NDArray[np.int64]"]


def search_packed(
    query: Query, source: Packed, limit: int, keep: Callable[[int], bool] | None = None
) -> list[tuple[int, float]]:
    """search over a Packed source, in bulk: each feature's postings as columns, its terms' BM25 summed
    per document with numpy in the order and by the very operations of `scored` (so the same floats), the
    best found by partition and sorted, `keep` asked of those only. Precondition: limit > 0 and
    numpy is installed."""
    n_docs, total = source.totals()
    if n_docs == 0:
        return []
    phrase_starts = _phrase_counter(source)
    excluded = [keys for clause in query.exclude
                for keys, _tfs, _lengths in _clause_columns(clause, source, phrase_starts).values()]
    features: dict[Feature, Columns] = {}
    for clause in query.include:
        features.update(_clause_columns(clause, source, phrase_starts))
    if not features:
        return []
    ordered = [columns for _feature, columns in sorted(features.items(), key=lambda item: _order(item[0]))]
    every, at = distinct(np.concatenate([keys for keys, _tfs, _lengths in ordered]))
    repeating = _repeating([len(keys) for keys, _tfs, _lengths in ordered], at, len(every))
    for i in repeating:  # a seq twice (rows written by hand): the last counts, as in a dict
        keys, tfs, lengths = ordered[i]
        _unique, last = np.unique(keys[::-1], return_index=True)
        last = len(keys) - 1 - last
        ordered[i] = (keys[last], tfs[last], lengths[last])
    if repeating:
        every, at = distinct(np.concatenate([keys for keys, _tfs, _lengths in ordered]))
    # every feature's postings in one column, in the features' order: np.add.at adds them one by one in
    # that order, so that each document's score is summed from 0.0 feature by feature, as in `scored`
    tfs = np.concatenate([tfs for _keys, tfs, _lengths in ordered])
    lengths = np.concatenate([lengths for _keys, _tfs, lengths in ordered])
    weights = np.repeat([idf(n_docs, len(keys)) for keys, _tfs, _lengths in ordered],
                        [len(keys) for keys, _tfs, _lengths in ordered])
    avg = total / n_docs
    norms = K1 * ((1 - B) + B * lengths / avg)  # norm(length, avg), operation by operation
    scores = np.zeros(len(every))
    np.add.at(scores, at, weights * (tfs * (K1 + 1) / (tfs + norms)))
    if excluded:
        kept = ~np.isin(every, np.concatenate(excluded))
        every, scores = every[kept], scores[kept]
    return _best_packed(every, scores, limit, keep)


ALONE = 1024
"""A feature of this many postings or more is checked for a document twice on its own (a pass over the
corpus's documents); the smaller ones together (a sort of their postings)."""


def _repeating(sizes: list[int], at: NDArray[np.int64], n: int) -> list[int]:
    """Which features (by their place in `sizes`, each one's number of postings) hold a document twice,
    given where each posting's document is among the `n` distinct ones (`at`, the features' postings one
    after the other)."""
    found: list[int] = []
    small: list[int] = []
    seen = np.zeros(n, dtype=np.bool_)
    start = 0
    for i, size in enumerate(sizes):
        if size >= ALONE:
            mine = at[start:start + size]
            seen[mine] = True
            if np.count_nonzero(seen) != size:
                found.append(i)
            seen[mine] = False
        elif size > 1:
            small.append(i)
        start += size
    if small:
        starts = np.cumsum([0, *sizes])
        picked = np.array(small)
        counts = np.array(sizes)[picked]
        # each posting of the small features as (feature, document), one number: equal ones are repeats
        offsets = np.repeat(starts[picked] - np.cumsum(np.concatenate(([0], counts[:-1]))), counts)
        places = np.arange(int(counts.sum())) + offsets
        pairs = np.sort(np.repeat(picked, counts) * n + at[places])
        repeats = pairs[1:][pairs[1:] == pairs[:-1]]
        found = sorted({*found, *(int(pair) // n for pair in repeats)})
    return found


def _order(feature: Feature) -> str:
    """The key features are summed in order of: repr(feature) (as `scored` sorts them), made without the
    dataclass's repr for a term."""
    return f"Term(text={feature.text!r})" if type(feature) is Term else repr(feature)


def distinct(keys: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The distinct keys, ascending, and where each of `keys` is among them. Keys that are seqs are dense
    (a corpus's documents are most of the seqs up to its last): when they are, a table indexed by key
    does it in linear time; else a sort."""
    if len(keys) and int(keys.min()) >= 0 and int(keys.max()) < 8 * len(keys) + 4096:
        place = np.zeros(int(keys.max()) + 1, dtype=np.int64)
        place[keys] = 1
        every = np.flatnonzero(place)
        place[every] = np.arange(len(every))
        return every, place[keys]
    order = np.argsort(keys)
    ordered = keys[order]
    new = np.empty(len(ordered), dtype=np.bool_)
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    at = np.empty(len(keys), dtype=np.int64)
    at[order] = np.cumsum(new) - 1
    return ordered[new], at


def _clause_columns(
    clause: Term | Phrase | Prefix, source: Packed, phrase_starts: Callable[[Phrase, int], int]
) -> dict[Feature, Columns]:
    """_clause_postings, as columns (keys, tfs, lengths)."""
    if isinstance(clause, Term):
        found = source.columns(clause.text)
        return {clause: found} if len(found[0]) else {}
    if isinstance(clause, Prefix):
        out: dict[Feature, Columns] = {}
        for term in source.expand(clause.text):
            if term.startswith(clause.text):
                found = source.columns(term)
                if len(found[0]):
                    out[Term(term)] = found
        return out
    starts: Mapping[int, int]
    lengths: Column[int, int]
    decided = _decided(clause, source, phrase_starts)
    if decided is not None:
        starts, lengths = decided
    else:
        postings = _clause_postings(clause, source, phrase_starts)
        if not postings:
            return {}
        (starts,) = postings.values()
        lengths = source.lengths()
    if not starts:
        return {}
    n = len(starts)
    return {clause: (np.fromiter(starts, dtype=np.int64, count=n),
                     np.fromiter(starts.values(), dtype=np.int64, count=n),
                     np.fromiter(map(lengths.__getitem__, starts), dtype=np.int64, count=n))}


def _best_packed(
    keys: NDArray[np.int64], scores: NDArray[np.float64], limit: int, keep: Callable[[int], bool] | None
) -> list[tuple[int, float]]:
    """_best over documents whose keys are their seqs, of those `keep` keeps: the scores at or above the
    `wanted`-th best are ordered in full (score down, then seq down) and walked, each asked of `keep`,
    until `limit` are kept; when too few are, `wanted` grows and the walk goes on."""
    out: list[tuple[int, float]] = []
    done = 0  # how many of the order have been walked
    wanted = limit
    while True:
        if wanted < len(keys):
            threshold = np.partition(scores, len(scores) - wanted)[len(scores) - wanted]
            chosen = np.flatnonzero(scores >= threshold)
        else:
            chosen = np.arange(len(keys))
        order = chosen[np.lexsort((-keys[chosen], -scores[chosen]))]
        for at in order[done:].tolist():
            key = int(keys[at])
            if keep is None or keep(key):
                out.append((key, float(scores[at])))
                if len(out) == limit:
                    return out
        if len(chosen) == len(keys):
            return out
        done = len(order)
        wanted *= 4


def _best(scores: dict[K, float], limit: int, seqs: Column[K, int]) -> list[tuple[K, float]]:
    """The `limit` best (key, score), highest score first, equal scores highest seq first. The score
    that makes the cut is found first; the scores above it are ordered in full, and of the documents
    at it (a common word in documents alike: many), those of the highest seqs fill the rest."""
    if len(scores) <= limit:
        items = list(scores.items())
        items.sort(key=lambda item: (-item[1], -seqs[item[0]]))
        return items
    threshold = heapq.nlargest(limit, scores.values())[-1]
    above = [(key, score) for key, score in scores.items() if score > threshold]
    above.sort(key=lambda item: (-item[1], -seqs[item[0]]))
    by_seq = {seqs[key]: key for key, score in scores.items() if score == threshold}  # one document per seq
    # sorted, not heapq.nlargest: seqs come mostly in increasing order, which timsort takes in one run
    newest = sorted(by_seq, reverse=True)[: limit - len(above)]
    return above + [(by_seq[seq], threshold) for seq in newest]


def _clause_postings(
    clause: Term | Phrase | Prefix, source: Source[K], phrase_starts: Callable[[Phrase, K], int]
) -> dict[Feature, Postings[K]]:
    """The features a clause stands for in the corpus, each with its documents (none that no document
    holds); `phrase_starts(phrase, key)` counts a phrase's occurrences in a document."""
    if isinstance(clause, Term):
        postings = source.postings(clause.text)
        return {clause: postings} if postings else {}
    if isinstance(clause, Prefix):
        out: dict[Feature, Postings[K]] = {}
        for term in source.expand(clause.text):
            if term.startswith(clause.text):
                postings = source.postings(term)
                if postings:
                    out[Term(term)] = postings
        return out
    # A phrase: from the positions the index keeps, with the text of the documents whose positions it
    # does not keep read for them; or the documents holding all its atoms, each one's text read.
    decided = _decided(clause, source, phrase_starts)
    if decided is not None:
        return {clause: decided[0]} if decided[0] else {}
    lists = sorted((source.postings(atom) for atom in set(clause.atoms)), key=len)
    if not lists or not lists[0]:
        return {}
    candidates = [key for key in lists[0] if all(key in other for other in lists[1:])]
    found: dict[K, int] = {}
    for key in candidates:
        starts = phrase_starts(clause, key)
        if starts:
            found[key] = starts
    return {clause: found} if found else {}


def _decided(
    phrase: Phrase, source: Source[K], phrase_starts: Callable[[Phrase, K], int]
) -> tuple[dict[K, int], Column[K, int]] | None:
    """Where `phrase` starts in each document of a Positional source that holds it (those whose positions
    it does not keep counted in their text), with those documents' lengths; None for another source,
    or when it cannot tell."""
    if not isinstance(source, Positional):
        return None
    decided = cast("Positional[K]", source).phrase(phrase.atoms)
    if decided is None:
        return None
    found, unknown, lengths = decided
    for key in unknown:
        starts = phrase_starts(phrase, key)
        if starts:
            found[key] = starts
    return found, lengths


@dataclass(frozen=True)
class Staged:
    """The key of a document written in an open transaction: the id of its record."""

    rec_id: str


@dataclass(frozen=True)
class StagedDoc:
    """A document written in an open transaction: its text, seq and terms counted."""

    text: str
    seq: int
    counts: dict[str, int]
    length: int

    @classmethod
    def of(cls, text: str, seq: int) -> StagedDoc:
        length, counts = counted(text)
        return cls(text, seq, counts, length)


class Overlay(Generic[K]):
    """A Source as an open transaction sees it: `hidden` documents of the base (the committed versions
    of records the transaction replaced or forgot, each one of the base's corpus) are gone, and `added`
    documents (the latest version the transaction wrote of each record it keeps in the corpus) are in."""

    def __init__(self, base: Source[K], hidden: Iterable[K], added: Mapping[str, StagedDoc]) -> None:
        self.base = base
        self.hidden = set(hidden)
        self.added = {Staged(rec_id): doc for rec_id, doc in added.items()}

    def totals(self) -> tuple[int, int]:
        docs, total = self.base.totals()
        docs += len(self.added) - len(self.hidden)
        lengths = self.base.lengths()
        total += sum(doc.length for doc in self.added.values()) - sum(lengths[key] for key in self.hidden)
        return docs, total

    def postings(self, term: str) -> Postings[K | Staged]:
        out: dict[K | Staged, int] = {key: tf for key, tf in self.base.postings(term).items() if key not in self.hidden}
        for key, doc in self.added.items():
            tf = doc.counts.get(term)
            if tf:
                out[key] = tf
        return out

    def expand(self, prefix: str) -> Iterable[str]:
        mine = {term for doc in self.added.values() for term in doc.counts if term.startswith(prefix)}
        return sorted(mine.union(self.base.expand(prefix)))

    def lengths(self) -> _Overlaid[K, int]:
        return _Overlaid(self.base.lengths(), {key: doc.length for key, doc in self.added.items()})

    def norms(self, avg: float, wanted: int) -> _Overlaid[K, float]:
        added = {key: norm(doc.length, avg) for key, doc in self.added.items()}
        return _Overlaid(self.base.norms(avg, wanted), added)

    def seqs(self) -> _Overlaid[K, int]:
        return _Overlaid(self.base.seqs(), {key: doc.seq for key, doc in self.added.items()})


    def text(self, key: K | Staged) -> str:
        return self.added[key].text if isinstance(key, Staged) else self.base.text(key)


V = TypeVar("V")


class _Overlaid(Generic[K, V]):
    """A base Source's column, with the values of the overlay's own documents."""

    def __init__(self, base: Column[K, V], added: Mapping[Staged, V]) -> None:
        self.base, self.added = base, added

    def __getitem__(self, key: K | Staged) -> V:
        return self.added[key] if isinstance(key, Staged) else self.base[key]
