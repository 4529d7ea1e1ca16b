"""The C extension's count of an ASCII text's terms (mnemo/_speedups.c, count_terms) against the
pure-Python analysis it stands in for: the same length, the same terms counted in the same order, on
identifiers of every shape and on arbitrary ASCII; None for any text that is not ASCII; a brief
fuzzing run (atheris over the twin, then an AddressSanitizer + UBSan build)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from helpers.native_fuzz import fuzz
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemo._native import speedups
from mnemo.recall import analysis
from mnemo.recall.analysis import atoms, counted, phrase_count, terms
from mnemo.recall.query import Phrase, occurrences

needs_native = pytest.mark.skipif(speedups is None, reason="the C extension is not built")


def twin(text: str) -> tuple[int, list[tuple[str, int]]]:
    found = terms(text)
    return len(found), list(Counter(found).items())


def native(text: str) -> tuple[int, list[tuple[str, int]]] | None:
    got = speedups.count_terms(text)
    return None if got is None else (got[0], list(got[1].items()))


@needs_native
@pytest.mark.parametrize("text", [
    "", " ", "...", "___", "_", "a", "A", "1", "Ab", "AB", "aB", "A1", "1A", "a1B", "ABC1",
    "snake_case camelCase file.py 3.11 get_fooBar HTTPServer XMLHttpRequest",
    "aBCd aBCDe ABCdEF AbC fooBAR_baz __init__ _x_ a..b x.y. .a_ e.g. U.S.A 1.2.3",
    "Hello, world! state-of-the-art (yes) don't\nnew\tline\x00nul\x7f",
    "case Case CASE case_case", "x" * 5000, "aB" * 300,
])
def test_count_terms_is_the_analysis_of_ascii(text: str) -> None:
    assert native(text) == twin(text)


@needs_native
def test_count_terms_counts_in_order_of_first_occurrence() -> None:
    assert speedups.count_terms("b a_b B") == (5, {"b": 3, "a_b": 1, "a": 1})
    assert list(speedups.count_terms("zz yy zz xx")[1]) == ["zz", "yy", "xx"]


@needs_native
@pytest.mark.parametrize("text", ["café", "東京", "x\u00a0y", "\ud800", "A\u0301"])
def test_count_terms_leaves_text_that_is_not_ascii_to_the_twin(text: str) -> None:
    assert speedups.count_terms(text) is None
    assert counted(text) == (len(terms(text)), dict(Counter(terms(text))))


@needs_native
def test_count_terms_takes_only_str() -> None:
    with pytest.raises(TypeError, match="count_terms takes a str"):
        speedups.count_terms(b"bytes")


_IDENTIFIERS = st.text(st.sampled_from(list("aAbBzZ09_. -\n,")), max_size=40)


@needs_native
@settings(max_examples=2000, deadline=None)
@given(_IDENTIFIERS | st.text(st.characters(max_codepoint=127), max_size=120))
def test_count_terms_equals_its_twin_on_any_ascii(text: str) -> None:
    assert native(text) == twin(text)


@settings(max_examples=300, deadline=None)
@given(_IDENTIFIERS | st.text(st.characters(max_codepoint=127), max_size=120))
def test_the_ascii_fast_path_is_the_general_analysis(text: str) -> None:
    """ASCII text is split by a simpler pattern than the general one; an em dash (a separator that NFKC
    leaves alone) makes the same text take the general path, which must give the same terms."""
    assert terms(text) == terms(text + "\u2014")
    assert analysis.analyse(text) == analysis.analyse(text + "\u2014")


@needs_native
@settings(max_examples=1000, deadline=None)
@given(text=_IDENTIFIERS | st.text(st.characters(max_codepoint=127), max_size=120), data=st.data())
def test_count_phrase_equals_occurrences_over_the_twin_s_atoms(text: str, data: st.DataObject) -> None:
    found = atoms(text)
    if len(found) >= 2 and data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(found) - 2))
        phrase = tuple(found[at:at + data.draw(st.integers(2, 3))])
    else:
        phrase = tuple(data.draw(st.lists(st.sampled_from(["a", "b", "ab", "x", "0", "9"]), min_size=2, max_size=3)))
    assert speedups.count_phrase(text, phrase) == occurrences(Phrase(phrase), found)


@needs_native
def test_count_phrase_counts_each_start_and_leaves_text_that_is_not_ascii_to_the_twin() -> None:
    assert speedups.count_phrase("fooBar foo_bar FOO bar", ("foo", "bar")) == 3
    assert speedups.count_phrase("a a a", ("a", "a")) == 2
    assert speedups.count_phrase("café bar", ("cafe", "bar")) is None
    assert speedups.count_phrase("cafe bar", ("café", "bar")) == 0  # an atom no ASCII text holds
    assert phrase_count("get_fooBar now", ("foo", "bar")) == 1
    with pytest.raises(TypeError):
        speedups.count_phrase("text", ["a", "b"])


def test_phrase_count_without_the_extension_leaves_the_count_to_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(analysis, "speedups", None)
    assert phrase_count("foo bar", ("foo", "bar")) is None


def test_counted_without_the_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(analysis, "speedups", None)
    assert counted("get_fooBar café get") == (7, {"get_foobar": 1, "get": 2, "foobar": 1, "foo": 1, "bar": 1,
                                                  "cafe": 1})


@pytest.mark.slow  # with the sanitized build it needs; .ci/run runs it (-m slow)
@needs_native
def test_count_terms_survives_a_brief_fuzzing_run(tmp_path: Path) -> None:
    guided, sanitized = fuzz(tmp_path, 1000, 1000, target="analysis", unit="runs")
    assert guided.runs >= 1000 and sanitized.runs >= 1000
    assert guided.corpus > 4  # it found inputs beyond the seeds
