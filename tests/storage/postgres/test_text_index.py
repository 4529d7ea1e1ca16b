"""What a PostgreSQL commit writes of a text to the text index (text_index.analysed): its length, its terms
counted in the order they first occur, and each term's places among the text's atoms packed as
mnemo_terms.positions holds them; found by the C extension for ASCII text (mnemo/_speedups.c,
term_positions) and by its pure-Python twin, which these tests hold to the same answers (the fuzzing run
is tests/recall/test_analysis_native.py's, target `analysis`)."""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemo._native import speedups
from mnemo.recall.analysis import terms
from mnemo.storage.postgres import text_index
from mnemo.storage.postgres.text_index import (
    NOT_KEPT,
    POSITIONS_MAX,
    Doc,
    analysed,
    pack_places,
    positions_of,
    unpack_places,
)

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
    """Places below 128 as mnemo_terms.positions holds them: their number plus one, then each one's gap
    from the one before (the first: itself), a byte each."""
    gaps = [b - a for a, b in zip((0, *places), places, strict=False)]
    assert len(places) < 127 and all(0 <= gap < 128 for gap in gaps)
    return bytes([len(places) + 1, *gaps])


def native_ints(data: bytes) -> list[int]:
    return list(array("i", data))


def test_a_text_s_terms_and_their_places(way: str) -> None:
    doc = analysed("Hello snake_case, world: hello get_fooBar x.y")
    assert packed(0, 4) == b"\x03\x00\x04" and packed() == b"\x01"
    assert doc == Doc(14, {"hello": 2, "snake_case": 1, "snake": 1, "case": 1, "world": 1, "get_foobar": 1,
                           "get": 1, "foobar": 1, "foo": 1, "bar": 1, "x.y": 1, "x": 1, "y": 1},
                      {"hello": packed(0, 4), "snake_case": packed(), "snake": packed(1), "case": packed(2),
                       "world": packed(3), "get_foobar": packed(), "get": packed(5), "foobar": packed(),
                       "foo": packed(6), "bar": packed(7), "x.y": packed(), "x": packed(8), "y": packed(9)})
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
        {"cafe": packed(0, 5), "naive": packed(1), "get_foobar": packed(), "get": packed(2), "foobar": packed(),
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


def test_places_packed_as_varints_of_their_gaps() -> None:
    assert pack_places([]) == b"\x01"
    # 6 + 1 places; gaps 0, 1, 126, 1, 172 (0b1_0101100: 0x80 | 0x2C, 1), 19700 (0b1_0011001_1110100)
    assert pack_places([0, 1, 127, 128, 300, 20000]) == bytes([7, 0, 1, 126, 1, 0xAC, 0x01, 0xF4, 0x99, 0x01])
    assert pack_places([2**31 - 1]) == b"\x02\xff\xff\xff\xff\x07"


def test_the_places_of_many_postings_read_one_after_the_other(way: str) -> None:
    blob = pack_places([0, 4, 300]) + NOT_KEPT + pack_places([]) + pack_places([7]) + pack_places([2**31 - 1])
    found = unpack_places(blob, 5)
    assert found is not None
    assert native_ints(found[0]) == [3, -1, 0, 1, 1]
    assert native_ints(found[1]) == [0, 4, 300, 7, 2**31 - 1]
    assert unpack_places(b"", 0) == (b"", b"")


@pytest.mark.parametrize(("blob", "postings"), [
    (pack_places([1, 2]), 2),  # another number of postings than asked for
    (pack_places([1, 2]) + NOT_KEPT, 1),
    (b"\x05\x00", 1),  # four places said, one there
    (b"\x03\x00\x80", 1),  # a varint cut short
    (b"\x80", 1),
    (b"\x02\x80\x80\x80\x80\x80\x00", 1),  # a varint of more than 5 bytes
    (b"\x02\xff\xff\xff\xff\x10", 1),  # a varint above 2**32 - 1
    (b"\x02\x80\x80\x80\x80\x08", 1),  # a place of 2**31
    (b"\x03\xff\xff\xff\xff\x07\x01", 1),  # the second place past 2**31 - 1
    (b"\xff\xff\xff\xff\x0f", 1),  # 2**32 - 2 places said, none there
])
def test_positions_that_do_not_decode_are_refused(way: str, blob: bytes, postings: int) -> None:
    assert unpack_places(blob, postings) is None


def test_positions_of_a_text_read_back(way: str) -> None:
    doc = analysed("alpha beta alpha " * 30 + "x_y " * (POSITIONS_MAX + 1) + "long " * 200 + "alpha")
    values = [NOT_KEPT if p is None else p for p in doc.positions.values()]
    found = unpack_places(b"".join(values), len(values))
    assert found is not None
    assert native_ints(found[0]) == [61, 30, 0, -1, -1, -1]  # alpha, beta, x_y (no atom), x, y, long
    assert doc.positions["x_y"] == b"\x01" and doc.positions["long"] is None
    alpha = [i for i in range(90) if i % 3 != 1]
    assert native_ints(found[1]) == [*alpha, 90 + 2 * 65 + 200, *range(1, 90, 3)]
