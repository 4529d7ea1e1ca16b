"""What a PostgreSQL commit writes of a text to the text index (text_index.analysed): its length, its terms
counted in the order they first occur, and each term's places among the text's atoms packed as
mnemo_terms.positions holds them; found by the C extension for ASCII text (mnemo/_speedups.c,
term_positions) and by its pure-Python twin, which these tests hold to the same answers (the fuzzing run
is tests/recall/test_analysis_native.py's, target `analysis`)."""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemo._native import speedups
from mnemo.recall.analysis import terms
from mnemo.storage.postgres import text_index
from mnemo.storage.postgres.text_index import POSITIONS_MAX, Doc, analysed, positions_of

needs_native = pytest.mark.skipif(speedups is None, reason="the C extension is not built")


@pytest.fixture(params=["native", "twin"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test runs on the C extension and on the pure-Python twin."""
    if request.param == "native":
        if speedups is None:
            pytest.skip("the C extension is not built")
    else:
        monkeypatch.setattr(text_index, "speedups", None)
    yield str(request.param)


def packed(*places: int) -> bytes:
    return struct.pack(f">{len(places)}i", *places)


def test_a_text_s_terms_and_their_places(way: str) -> None:
    doc = analysed("Hello snake_case, world: hello get_fooBar x.y")
    assert doc == Doc(14, {"hello": 2, "snake_case": 1, "snake": 1, "case": 1, "world": 1, "get_foobar": 1,
                           "get": 1, "foobar": 1, "foo": 1, "bar": 1, "x.y": 1, "x": 1, "y": 1},
                      {"hello": packed(0, 4), "snake_case": b"", "snake": packed(1), "case": packed(2),
                       "world": packed(3), "get_foobar": b"", "get": packed(5), "foobar": b"",
                       "foo": packed(6), "bar": packed(7), "x.y": b"", "x": packed(8), "y": packed(9)})
    assert list(doc.counts) == list(doc.positions) == ["hello", "snake_case", "snake", "case", "world",
                                                         "get_foobar", "get", "foobar", "foo", "bar", "x.y",
                                                         "x", "y"]


def test_a_term_at_more_places_than_the_index_keeps_has_none(way: str) -> None:
    doc = analysed("a " * POSITIONS_MAX + "b")
    assert doc.positions == {"a": packed(*range(POSITIONS_MAX)), "b": packed(POSITIONS_MAX)}
    doc = analysed("a " * (POSITIONS_MAX + 1) + "b")
    assert doc.positions == {"a": None, "b": packed(POSITIONS_MAX + 1)}
    assert doc.counts == {"a": POSITIONS_MAX + 1, "b": 1}


@pytest.mark.parametrize("text", ["", " ", "...", "___", "_", "__init__ .a_ a..b"])
def test_texts_of_few_or_no_atoms(way: str, text: str) -> None:
    found = terms(text)
    counts = dict(Counter(found))
    places = {term: packed(*(i for i, atom in enumerate(["init", "a", "a", "b"]) if atom == term)) for term in counts}
    assert analysed(text) == Doc(len(found), counts, places if text.startswith("__init__") else {})


def test_text_that_is_not_ascii(way: str) -> None:
    assert analysed("Café naïve get_fooBar café") == Doc(
        8, {"cafe": 2, "naive": 1, "get_foobar": 1, "get": 1, "foobar": 1, "foo": 1, "bar": 1},
        {"cafe": packed(0, 5), "naive": packed(1), "get_foobar": b"", "get": packed(2), "foobar": b"",
         "foo": packed(3), "bar": packed(4)})
    if speedups is not None:
        assert speedups.term_positions("Café", POSITIONS_MAX) is None  # (left to the twin)


@needs_native
def test_term_positions_takes_a_str_and_a_limit() -> None:
    with pytest.raises(TypeError):
        speedups.term_positions(b"bytes", 64)
    with pytest.raises(TypeError):
        speedups.term_positions("text")
    assert speedups.term_positions("a a b", 1) == (3, {"a": 2, "b": 1}, {"a": None, "b": packed(2)})
    assert speedups.term_positions("a", -1) == (1, {"a": 1}, {"a": None})


_IDENTIFIERS = st.text(st.sampled_from(list("aAbBzZ09_. -\n,")), max_size=60)


@needs_native
@settings(max_examples=1000, deadline=None)
@given(text=_IDENTIFIERS | st.text(st.characters(max_codepoint=127), max_size=160), limit=st.integers(-1, 70))
def test_term_positions_equals_its_twin_on_any_ascii(text: str, limit: int) -> None:
    found = terms(text)
    counts = dict(Counter(found))
    got = speedups.term_positions(text, limit)
    assert got is not None
    assert (got[0], list(got[1].items()), list(got[2].items())) == (
        len(found), list(counts.items()), list(positions_of(text, counts, limit).items()))
