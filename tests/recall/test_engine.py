"""The ranking over a Source that gives its postings as columns (engine.Packed): scored in bulk with numpy
(engine.search_packed), it gives the very ids, order and floats of the ranking one posting at a time
(engine.scored, what runs without numpy), whatever the documents' seqs (dense or far apart), the words,
prefixes, phrases and exclusions of the query, the limit and the filter on hits; a term listing a
document twice counts its later posting, as a mapping keeps the later value (features ordered by their
repr, as `scored` sums them)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemo.recall import engine
from mnemo.recall.analysis import terms
from mnemo.recall.query import parse

WORDS = ["alpha", "alps", "beta", "bet", "gamma", "delta", "al"]


class Columns:
    """An index over texts named by seq, as a backend's Source, that also gives columns (engine.Packed);
    `extra` adds postings written twice (term -> [(seq, tf)], after the real ones)."""

    bulk = True  # (scored in bulk however few its postings)

    def __init__(self, texts: dict[int, str], extra: dict[str, list[tuple[int, int]]] | None = None) -> None:
        self.texts = texts
        self.by_term: dict[str, list[tuple[int, int]]] = {}
        self._lengths: dict[int, int] = {}
        for seq, text in texts.items():
            found = terms(text)
            self._lengths[seq] = len(found)
            for term, tf in Counter(found).items():
                self.by_term.setdefault(term, []).append((seq, tf))
        for term, rows in (extra or {}).items():
            self.by_term.setdefault(term, []).extend(rows)

    def totals(self) -> tuple[int, int]:
        return len(self.texts), sum(self._lengths.values())

    def postings(self, term: str) -> dict[int, int]:
        return dict(self.by_term.get(term, []))

    def columns(self, term: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows = self.by_term.get(term, [])
        return (np.array([seq for seq, _tf in rows], dtype=np.int64),
                np.array([tf for _seq, tf in rows], dtype=np.int64),
                np.array([self._lengths[seq] for seq, _tf in rows], dtype=np.int64))

    def expand(self, prefix: str) -> list[str]:
        return sorted(term for term in self.by_term if term.startswith(prefix))

    def lengths(self) -> dict[int, int]:
        return self._lengths

    def norms(self, avg: float, wanted: int) -> dict[int, float]:
        return {seq: engine.norm(length, avg) for seq, length in self._lengths.items()}

    def seqs(self) -> dict[int, int]:
        return {seq: seq for seq in self.texts}

    def text(self, key: int) -> str:
        return self.texts[key]


class OneByOne(Columns):
    """The same index without columns: search ranks it one posting at a time."""

    columns = None  # type: ignore[assignment]
    bulk = False


def _both(texts: dict[int, str], query: str, limit: int, keep_odd: bool,
          extra: dict[str, list[tuple[int, int]]] | None = None) -> tuple[list[tuple[int, float]], ...]:
    packed, plain = Columns(texts, extra), OneByOne(texts, extra)
    assert isinstance(packed, engine.Packed) and not isinstance(plain, engine.Packed)
    keep = (lambda seq: seq % 2 == 1) if keep_odd else None
    parsed = parse(query)
    return engine.search_packed(parsed, packed, limit, keep), engine.search(parsed, plain, limit, keep)


texts_strategy = st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join),
                          min_size=1, max_size=40)
queries = st.sampled_from(["alpha", "al*", "alpha beta", "be* -gamma", '"alpha beta"', "al* bet*", "gamma -al*",
                           '"beta beta" delta', "nothing", "alps al*"])


@settings(max_examples=150, deadline=None)
@given(texts=texts_strategy, query=queries, limit=st.integers(1, 12), keep_odd=st.booleans(),
       spread=st.sampled_from([1, 7, 1_000_003]), start=st.sampled_from([0, 5, 2**40]))
def test_bulk_scores_equal_one_by_one(texts: list[str], query: str, limit: int, keep_odd: bool, spread: int,
                                      start: int) -> None:
    """Seqs close together (a table indexed by seq places them) or far apart (a sort does): the same."""
    by_seq = {start + i * spread: text for i, text in enumerate(texts)}
    bulk, one_by_one = _both(by_seq, query, limit, keep_odd)
    assert bulk == one_by_one
    assert all(type(seq) is int and type(score) is float for seq, score in bulk)


def test_equal_scores_rank_the_newest_first_past_the_limit() -> None:
    """Forty equal documents: the best ten are the newest, with or without a filter that passes over half."""
    texts = {seq: "alpha beta" for seq in range(100, 140)}
    bulk, one_by_one = _both(texts, "alpha", 10, keep_odd=True)
    assert bulk == one_by_one and [seq for seq, _score in bulk] == list(range(139, 119, -2))


@pytest.mark.parametrize("alone", [1, engine.ALONE])
@pytest.mark.parametrize("spread", [1, 1_000_003])
def test_a_posting_listed_twice_counts_once_with_its_later_frequency(
    spread: int, alone: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a feature's postings are checked for repeats on their own or with the others' (a sort)."""
    monkeypatch.setattr(engine, "ALONE", alone)
    texts = {i * spread: text for i, text in enumerate(["alpha beta", "alpha", "beta gamma", "alpha alpha"])}
    again = {"alpha": [(0, 5)], "alps": [(spread, 1), (spread, 2)]}
    bulk, one_by_one = _both(texts, "alpha al*", 10, keep_odd=False, extra=again)
    assert bulk == one_by_one
    once = OneByOne(texts)  # each listed once, with the later frequency
    once.by_term["alpha"] = [(seq, 5 if seq == 0 else tf) for seq, tf in once.by_term["alpha"]]
    once.by_term["alps"] = [(spread, 2)]
    assert bulk == engine.search(parse("alpha al*"), once, 10)
    assert {seq for seq, _score in bulk} == {0, spread, 3 * spread}


def test_features_are_ordered_by_their_repr() -> None:
    features = [engine.Term(text) for text in ["b", "a'", 'q"', "a", "é", "a\\b"]] + [engine.Phrase(("a", "b"))]
    assert [engine._order(f) for f in features] == [repr(f) for f in features]
