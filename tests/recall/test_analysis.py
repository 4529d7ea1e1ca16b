"""Text analysis, term for term: normalisation (NFKC, accents, case), words, the spaceless scripts'
bigrams, identifiers whole and by parts, the atoms phrases match, the lines of a result; and properties
over arbitrary text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemo.recall.analysis import (
    LINE_CHARS,
    Word,
    analyse,
    atoms,
    fold,
    marked_spans,
    matching_lines,
    terms,
    words,
)


@pytest.mark.parametrize(("text", "expected"), [
    # accents folded, both precomposed and combining
    ("café", ["cafe"]),
    ("cafe\u0301", ["cafe"]),
    ("Crème Brûlée à Zürich", ["creme", "brulee", "a", "zurich"]),
    ("naïve Ångström", ["naive", "angstrom"]),
    # case folded, ß to ss, and the İ whose lower case carries a combining dot
    ("Straße STRASSE strasse", ["strasse", "strasse", "strasse"]),
    ("İstanbul", ["istanbul"]),
    ("ΣΊΣΥΦΟΣ", ["σισυφοσ"]),
    # NFKC: full-width letters and digits, the fi ligature, circled and superscript digits
    ("ＡＢＣ １２３", ["abc", "123"]),
    ("ﬁle ﬂow", ["file", "flow"]),
    ("① x²", ["1", "x2"]),
    # words split at spaces, punctuation and symbols; - separates
    ("Hello, world! state-of-the-art (yes)", ["hello", "world", "state", "of", "the", "art", "yes"]),
    ("end. Next x..y", ["end", "next", "x", "y"]),
    ("", []),
    ("  \n\t ", []),
    ("--- !!! ...", []),
    ("\ud800café\x00x", ["cafe", "x"]),  # a lone surrogate and a NUL separate words, as any non-word does
])
def test_normalisation_and_words(text: str, expected: list[str]) -> None:
    assert terms(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("東京都", ["東京", "京都"]),
    ("東", ["東"]),
    ("東京都に行く", ["東京", "京都", "都に", "に行", "行く"]),
    ("カタカナ", ["カタ", "タカ", "カナ"]),
    ("ｶﾀｶﾅ", ["カタ", "タカ", "カナ"]),  # half-width katakana, NFKC'd to full width
    ("中文 搜索", ["中文", "搜索"]),
    ("我爱Python编程", ["我爱", "python", "编程"]),
    ("ภาษาไทย", ["ภา", "าษ", "ษา", "าไ", "ไท", "ทย"]),
    ("ไม่", ["ไม", "ม่"]),  # the tone mark is part of the word, not an accent
    ("한국어 검색", ["한국어", "검색"]),  # Hangul is written with spaces: whole words
    ("हिन्दी भाषा", ["हिन्दी", "भाषा"]),  # vowel signs and virama stay in their word
])
def test_scripts(text: str, expected: list[str]) -> None:
    assert terms(text) == expected


@pytest.mark.parametrize(("text", "expected_terms", "expected_atoms"), [
    ("snake_case", ["snake_case", "snake", "case"], ["snake", "case"]),
    ("camelCase", ["camelcase", "camel", "case"], ["camel", "case"]),
    ("file.py", ["file.py", "file", "py"], ["file", "py"]),
    ("3.11", ["3.11", "3", "11"], ["3", "11"]),
    ("HTTPServer", ["httpserver", "http", "server"], ["http", "server"]),
    ("getHTTPResponse", ["gethttpresponse", "get", "http", "response"], ["get", "http", "response"]),
    ("utf8Decoder", ["utf8decoder", "utf8", "decoder"], ["utf8", "decoder"]),
    ("__init__.py", ["__init__.py", "init", "py"], ["init", "py"]),
    ("mnemo.recall.analysis", ["mnemo.recall.analysis", "mnemo", "recall", "analysis"],
     ["mnemo", "recall", "analysis"]),
    ("Hello", ["hello"], ["hello"]),
    ("NASA", ["nasa"], ["nasa"]),
    ("utf8", ["utf8"], ["utf8"]),
    ("A1B", ["a1b", "a1", "b"], ["a1", "b"]),
    ("SHA256HASH", ["sha256hash", "sha256", "hash"], ["sha256", "hash"]),
    ("Ωmega ΩMEGA", ["ωmega", "ωmega"], ["ωmega", "ωmega"]),
    ("___", [], []),
    ("get_fooBar", ["get_foobar", "get", "foobar", "foo", "bar"], ["get", "foo", "bar"]),
    ("0A_", ["0a_", "0a", "0", "a"], ["0", "a"]),
    ("Café_Menu", ["cafe_menu", "cafe", "menu"], ["cafe", "menu"]),
    ("read snake_case.py now", ["read", "snake_case.py", "snake", "case", "py", "now"],
     ["read", "snake", "case", "py", "now"]),
])
def test_identifiers_whole_and_by_parts(text: str, expected_terms: list[str], expected_atoms: list[str]) -> None:
    assert terms(text) == expected_terms
    assert atoms(text) == expected_atoms
    assert analyse(text) == (expected_terms, expected_atoms)


def test_length_counts_the_whole_and_each_part() -> None:
    assert len(terms("open file.py")) == 1 + (1 + 2)
    assert len(terms("東京都")) == 2
    assert len(terms("get_fooBar")) == 5


def test_words_as_a_query_reads_them() -> None:
    assert words("camelCase 東京都 東 x") == [
        Word("camelcase", ("camel", "case")),
        Word("東京都", ("東京", "京都"), bigrams=True),
        Word("東", ("東",)),
        Word("x", ("x",)),
    ]


def test_fold() -> None:
    assert fold("Ｃａｆé ﬁ") == "Cafe fi"
    assert fold("plain ascii") == "plain ascii"


def test_matching_lines() -> None:
    text = "first line\nthe cat sat\n\nno match here\na cat and a dog\n" + "cat " * 100
    assert matching_lines(text, {"cat", "dog"}) == [(2, "the cat sat"), (5, "a cat and a dog"),
                                                     (6, ("cat " * 100)[:LINE_CHARS])]
    assert matching_lines(text, {"cat", "dog"}, limit=1) == [(5, "a cat and a dog")]
    assert matching_lines(text, {"dog"}, limit=0) == []
    assert matching_lines(text, set(), prefixes=("fir",)) == [(1, "first line")]
    assert matching_lines("a\r\nCafé\r\n", {"cafe"}) == [(2, "Café\r")]
    assert len(matching_lines("x" * 500, {"x" * 500})[0][1]) == LINE_CHARS == 200


# -- properties --------------------------------------------------------------------------------------------

TEXT = st.text(st.characters(codec="utf-8"), max_size=200) | st.text(
    st.sampled_from("aZ_.9 éßİﬁＡ東京ภาไ่-\n\u0301\ud800"), max_size=60)


@settings(max_examples=400, deadline=None)
@given(TEXT)
def test_analysis_never_raises_and_is_idempotent_on_its_terms(text: str) -> None:
    found = terms(text)
    assert all(isinstance(term, str) and term for term in found)
    assert set(terms(" ".join(found))) == set(found)
    for term in set(found):
        assert term in terms(term), term  # every term finds itself


@settings(max_examples=200, deadline=None)
@given(TEXT)
def test_atoms_are_terms_and_lines_never_raise(text: str) -> None:
    analysed = analyse(text)
    assert set(analysed.atoms) <= set(analysed.terms)
    for number, line in matching_lines(text, set(analysed.terms), limit=5):
        assert number >= 1 and len(line) <= LINE_CHARS


def _lines_by_analysis(text: str, wanted: set[str], prefixes: tuple[str, ...]) -> list[tuple[int, str]]:
    """matching_lines as its contract says, every line analysed."""
    ranked = []
    for number, line in enumerate(text.split("\n"), start=1):
        present = set(terms(line))
        hits = len(present & wanted) + sum(1 for p in prefixes if any(t.startswith(p) for t in present))
        if hits:
            ranked.append((-hits, number, line))
    ranked.sort()
    return sorted((number, line[:LINE_CHARS]) for _, number, line in ranked[:3])


_LINE_TEXT = st.text(st.sampled_from(list("aB_.-1 \nCçéİ東京xY")), max_size=80)


@settings(max_examples=300, deadline=None)
@given(text=_LINE_TEXT, query=_LINE_TEXT, cut=st.integers(0, 3))
def test_lines_passed_over_unanalysed_are_those_holding_no_term(text: str, query: str, cut: int) -> None:
    """An ASCII line that holds no wanted term or prefix as a substring of it lower-cased is passed over
    unanalysed: the lines shown are those a full analysis of every line would pick."""
    wanted = set(terms(query))
    prefixes = tuple(t[:cut] for t in terms(query)[:2] if len(t) > cut >= 2)
    assert matching_lines(text, wanted, prefixes) == _lines_by_analysis(text, wanted, prefixes)


def test_marked_spans_are_the_words_that_yield_a_wanted_term() -> None:
    line = "The Café, get_fooBar and 東京都 <b>cafe</b>"
    spans = marked_spans(line, {"cafe", "foo", "京都"})
    assert [line[a:b] for a, b in spans] == ["Café", "get_fooBar", "東京都", "cafe"]
    assert marked_spans(line, set(), ("ge",)) == [(10, 20)]
    assert [line[a:b] for a, b in marked_spans(line, {"b"})] == ["b", "b"]  # the words of the markup, as text
    assert marked_spans(line, set()) == [] and marked_spans("", {"x"}) == []


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60), st.sets(st.text(min_size=1, max_size=4), max_size=3))
def test_marked_spans_are_ordered_disjoint_and_yield_what_is_wanted(line: str, wanted: set[str]) -> None:
    spans = marked_spans(line, wanted)
    assert all(a < b for a, b in spans) and all(b <= c for (_, b), (c, _) in zip(spans, spans[1:], strict=False))
    for a, b in spans:
        assert set(terms(line[a:b])) & wanted
