"""Okapi BM25 against scores worked out by hand on a tiny corpus (the arithmetic is written beside each),
the ranking's order and ties, and the prefix and phrase rules."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemo.recall.analysis import analyse
from mnemo.recall.bm25 import K1, B, Candidate, Corpus, Scored, idf, rank, saturation, score
from mnemo.recall.query import Feature, parse

# seq 1: "the cat sat"        terms the, cat, sat          length 3
# seq 2: "the dog"            terms the, dog               length 2
# seq 3: "cat cat dog bird"   terms cat, cat, dog, bird    length 4
# N = 3, avgdl = (3 + 2 + 4) / 3 = 3
CORPUS = {1: "the cat sat", 2: "the dog", 3: "cat cat dog bird"}


def search(query: str, documents: dict[int, str], limit: int = 10) -> list[tuple[int, float]]:
    """The reference the backends will be held to: every document a candidate, statistics over all."""
    parsed = parse(query)
    analysed = {seq: analyse(text) for seq, text in documents.items()}
    matched = {seq: parsed.features(doc) for seq, doc in analysed.items()}
    doc_freqs: dict[Feature, int] = {}
    for features in matched.values():
        for feature in features or {}:
            doc_freqs[feature] = doc_freqs.get(feature, 0) + 1
    corpus = Corpus(len(documents), sum(len(doc.terms) for doc in analysed.values()) / len(documents), doc_freqs)
    candidates = [Candidate(seq, len(analysed[seq].terms), features) for seq, features in matched.items() if features]
    return [(found.candidate.seq, found.score) for found in rank(candidates, corpus, limit)]


def test_constants() -> None:
    assert (K1, B) == (1.2, 0.75)


def test_idf() -> None:
    assert idf(3, 2) == pytest.approx(math.log(1 + (3 - 2 + 0.5) / (2 + 0.5)), abs=1e-15)  # ln 1.6
    assert idf(3, 1) == pytest.approx(math.log(8 / 3), abs=1e-15)  # ln(1 + 2.5 / 1.5)
    assert idf(3, 3) == pytest.approx(math.log(1 + 0.5 / 3.5), abs=1e-15)  # a term in every document: > 0
    assert idf(1, 1) > 0


def test_saturation() -> None:
    assert saturation(1, 3, 3.0) == pytest.approx(1.0, abs=1e-15)  # 2.2 / (1 + 1.2 · (0.25 + 0.75))
    assert saturation(2, 4, 3.0) == pytest.approx(44 / 35, abs=1e-15)  # 4.4 / (2 + 1.2 · 1.25) = 4.4 / 3.5


def test_one_word() -> None:
    # cat: n = 2, IDF = ln 1.6
    # seq 3: tf 2, |d| 4: 2 · 2.2 / (2 + 1.2 · (0.25 + 0.75 · 4 / 3)) = 4.4 / 3.5 = 44 / 35
    # seq 1: tf 1, |d| 3: 2.2 / (1 + 1.2 · 1) = 1
    found = search("cat", CORPUS)
    assert [seq for seq, _ in found] == [3, 1]
    assert found[0][1] == pytest.approx(math.log(1.6) * 44 / 35, abs=1e-12)
    assert found[1][1] == pytest.approx(math.log(1.6), abs=1e-12)


def test_two_words_any_may_match() -> None:
    # dog: n = 2, IDF = ln 1.6
    # seq 3: cat 44 / 35, dog tf 1 |d| 4: 2.2 / (1 + 1.2 · 1.25) = 2.2 / 2.5 = 0.88
    # seq 2: dog tf 1 |d| 2: 2.2 / (1 + 1.2 · (0.25 + 0.75 · 2 / 3)) = 2.2 / 1.9 = 22 / 19
    # seq 1: cat 1
    found = dict(search("cat dog", CORPUS))
    assert found[3] == pytest.approx(math.log(1.6) * (44 / 35 + 0.88), abs=1e-12)
    assert found[2] == pytest.approx(math.log(1.6) * 22 / 19, abs=1e-12)
    assert found[1] == pytest.approx(math.log(1.6), abs=1e-12)
    assert [seq for seq, _ in search("cat dog", CORPUS)] == [3, 2, 1]


def test_a_rarer_word_weighs_more() -> None:
    # bird: n = 1, IDF = ln(1 + 2.5 / 1.5) = ln(8 / 3); seq 3: 0.88
    [(seq, found)] = search("bird", CORPUS)
    assert seq == 3 and found == pytest.approx(math.log(8 / 3) * 0.88, abs=1e-12)
    assert search("bird the", CORPUS)[0][0] == 3


def test_phrase_is_a_feature_of_its_own() -> None:
    # "cat sat": in seq 1 only, n = 1: ln(8 / 3) · 2.2 / (1 + 1.2 · 1) = ln(8 / 3)
    [(seq, found)] = search('"cat sat"', CORPUS)
    assert seq == 1 and found == pytest.approx(math.log(8 / 3), abs=1e-12)


def test_prefix_sums_its_expansions() -> None:
    # ca*: cat only (n = 2), as the word cat; c*: refused (too short)
    assert search("ca*", CORPUS) == search("cat", CORPUS)
    # do* on "dog dot": dog (n = 2 of 2) and dot (n = 1): each with its own IDF, summed
    # N = 2, avgdl = (2 + 1) / 2 = 1.5; seq 1 "dog dot": |d| 2, each tf 1:
    #   2.2 / (1 + 1.2 · (0.25 + 0.75 · 2 / 1.5)) = 2.2 / (1 + 1.2 · 1.25) = 2.2 / 2.5 = 0.88
    # dog: ln(1 + 0.5 / 2.5) = ln 1.2; dot: ln(1 + 1.5 / 1.5) = ln 2
    found = dict(search("do*", {1: "dog dot", 2: "dog"}))
    assert found[1] == pytest.approx((math.log(1.2) + math.log(2)) * 0.88, abs=1e-12)
    # seq 2 "dog": |d| 1: 2.2 / (1 + 1.2 · (0.25 + 0.75 / 1.5)) = 2.2 / 1.9
    assert found[2] == pytest.approx(math.log(1.2) * 2.2 / 1.9, abs=1e-12)
    assert search("dog do*", {1: "dog dot", 2: "dog"}) == search("do*", {1: "dog dot", 2: "dog"})


def test_excluded_and_unmatched_documents_are_not_ranked() -> None:
    assert [seq for seq, _ in search("cat -bird", CORPUS)] == [1]
    assert search("fish", CORPUS) == []


def test_ties_rank_the_newest_first_and_limit_cuts() -> None:
    same = {1: "a note", 5: "a note", 3: "a note", 4: "other"}
    assert [seq for seq, _ in search("note", same)] == [5, 3, 1]
    assert [seq for seq, _ in search("note", same, limit=2)] == [5, 3]
    assert search("note", same, limit=0) == []


def test_score_does_not_depend_on_the_mapping_order() -> None:
    corpus = Corpus(10, 5.0, {"a": 1, "b": 7, "c": 3})
    one = Candidate(1, 4, {"a": 1, "b": 2, "c": 3})
    other = Candidate(1, 4, {"c": 3, "b": 2, "a": 1})
    assert score(one, corpus) == score(other, corpus)
    assert rank([one], corpus, 1) == [Scored(score(one, corpus), one)]
    assert score(Candidate(2, 4, {"a": 0}), corpus) == 0.0


@given(st.lists(st.sampled_from(["cat", "dog", "bird", "fish", "cat dog", "the"]), min_size=1, max_size=12))
def test_ranked_by_score_then_newest(texts: list[str]) -> None:
    found = search("cat dog -fish", dict(enumerate(texts)), limit=len(texts))
    keys = [(-found_score, -seq) for seq, found_score in found]
    assert keys == sorted(keys)
    assert all(found_score > 0 for _, found_score in found)
    assert {seq for seq, _ in found} == {seq for seq, text in enumerate(texts) if set(text.split()) & {"cat", "dog"}}
