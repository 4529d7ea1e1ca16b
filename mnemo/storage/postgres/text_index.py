"""Recall's index in PostgreSQL's tables (docs/POSTGRES.md, "Recall"): `mnemo_docs`, a row for each live
record whose latest content is text (the seq of that version, which names the document, its record, scope
and length in terms); `mnemo_terms`, a row for each distinct term of each document (how often it holds
it and where it stands among the document's atoms, with the document's length and scope);
`mnemo_text_scopes`, each scope's number of documents and their total length.

The terms are mnemo.recall.analysis's, computed here in Python from the text the writer has in hand, so
that the index holds exactly what the file backend's does. This module holds a document as the index
holds it (doc_of, analysed: its length, terms and their positions) and how its columns are packed
(pack_places and unpack_places for the positions, unpacked for recall's columns); verify compares the
rows with the chain's documents (doc_of). The rest of the index is in the modules of its jobs: the rows
a commit writes in its own transaction (text_rows.py: TextRows, put_text_columns), the rows the
migrations to schema versions 5, 9 and 11 and a chain import build from the payloads (text_build.py:
build_text_index, build_positions, copy_text_index), and the Source recall reads them through, over the
rows of one statement (text_source.py: TableSource), which decides phrases from the positions
(text_phrases.py: phrase_starts).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from ..._native import speedups
from ...recall.analysis import atoms, counted
from ..recall import searchable_text

TERM_KEY = 256
"""The characters of a term that mnemo_terms' index orders by: a B-tree entry holds at most about 2.7 kB,
and a word of a text can be longer. A lookup compares the whole term after the index found its first
TERM_KEY characters."""


POSITIONS_MAX = 64
"""A term standing at more places of a document than this has no positions in mnemo_terms (NULL): an
index entry holds them, and this keeps it far below a B-tree entry's limit; a phrase is then checked in
that document's text."""


class Doc(NamedTuple):
    """A document: its length in terms, how often it holds each distinct term, and where each stands
    among its atoms (packed as mnemo_terms.positions holds them: b"" for none, None for more than
    POSITIONS_MAX)."""

    length: int
    counts: dict[str, int]
    positions: dict[str, bytes | None]


def doc_of(packed: bytes | memoryview) -> Doc | None:
    """The document of a version's packed fields, or None when its content is not text (bytes), or when
    the fields do not decode (a put written by hand: it is served as it is, and no reader takes it for
    text; the client says what is wrong with it)."""
    try:
        text = searchable_text(packed)
    except Exception:  # msgpack raises several unrelated types on garbage
        return None
    if text is None:
        return None
    return analysed(text)


def analysed(text: str) -> Doc:
    """The document of `text`: its length, terms and their positions. The C extension finds them in one
    pass over an ASCII text (mnemo/_speedups.c, term_positions: fuzzed against this twin, tools/fuzz_native.py
    --target analysis); its twin counts the terms (`counted`) and finds their positions (positions_of)."""
    if speedups is not None:
        native: tuple[int, dict[str, int], dict[str, bytes | None]] | None = speedups.term_positions(
            text, POSITIONS_MAX)
        if native is not None:
            return Doc(*native)
    length, counts = counted(text)
    return Doc(length, counts, positions_of(text, counts))


def positions_of(text: str, counts: Iterable[str], limit: int = POSITIONS_MAX) -> dict[str, bytes | None]:
    """Where each of the terms `counts` names stands among the atoms of `text`, packed (pack_places), None
    for a term at more than `limit` places."""
    where: dict[str, list[int]] = {}
    for i, atom in enumerate(atoms(text)):
        found = where.get(atom)
        if found is None:
            where[atom] = [i]
        else:
            found.append(i)
    out: dict[str, bytes | None] = {}
    for term in counts:
        places = where.get(term, ())
        out[term] = None if len(places) > limit else pack_places(places)
    return out


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def pack_places(places: Sequence[int]) -> bytes:
    """Places (increasing, from 0) as mnemo_terms.positions holds them (schema version 11): their number
    plus one, then each one's gap from the one before (the first: itself), each an unsigned LEB128
    varint. A posting's value so says where it ends, and the statement's NULL (no places kept) is the
    number 0 (NOT_KEPT): the positions of many postings, one after the other, are read without their
    sizes (unpack_places). A gap below 128 takes a byte, one below 16,384 two: in a text of some
    thousands of words, one or two bytes a place."""
    out = [_varint(len(places) + 1)]
    before = 0
    for place in places:
        out.append(_varint(place - before))
        before = place
    return b"".join(out)


NOT_KEPT = b"\x00"
"""What recall's statement reads for a posting whose positions are not kept (NULL in mnemo_terms)."""

_PLACE_MAX = 2**31 - 1


def unpack_places(data: bytes, postings: int) -> tuple[bytes, bytes] | None:
    """The positions of `postings` postings, one after the other as pack_places packs them (NOT_KEPT for
    one whose positions are not kept): how many each has (-1: not kept) and all of them, two columns of
    native 32-bit integers; None when `data` is not that (a varint of more than 5 bytes or above
    2**32 - 1, one cut short, a place above 2**31 - 1, or another number of postings): rows written by
    hand, and the texts decide the phrase. The C extension decodes them (mnemo/_speedups.c,
    unpack_places: fuzzed against its twin, unpack_places_twin)."""
    if speedups is not None:
        native: tuple[bytes, bytes] | None = speedups.unpack_places(data, postings)
        return native
    return unpack_places_twin(data, postings)


def unpack_places_twin(data: bytes, postings: int) -> tuple[bytes, bytes] | None:
    """unpack_places without the C extension."""
    counts, places = array(_CODES[4]), array(_CODES[4])
    at, end = 0, len(data)

    def varint() -> int | None:
        nonlocal at
        value = shift = 0
        for k in range(5):
            if at == end:
                return None
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value if value <= 0xFFFFFFFF else None
            if k == 4:
                return None
        return None  # (not reached)

    while at < end:
        code = varint()
        if code is None or code - 1 > end - at:  # (each place takes a byte at least)
            return None
        counts.append(code - 1)
        place = 0
        for k in range(code - 1):
            gap = varint()
            if gap is None:
                return None
            place = gap if k == 0 else place + gap
            if place > _PLACE_MAX:
                return None
            places.append(place)
    if len(counts) != postings:
        return None
    return counts.tobytes(), places.tobytes()


def unpacked(data: bytes, width: int) -> array[int]:
    """The integers of a column packed as recall_sql packs them (int8send or int4send of each: `width`
    bytes, big-endian), without numpy."""
    column = array(_CODES[width])
    column.frombytes(data)
    if sys.byteorder == "little":
        column.byteswap()
    return column


_CODES = {8: "q", 4: next(code for code in "ilh" if array(code).itemsize == 4)}


def native_column(data: bytes) -> array[int]:
    """A column of native 32-bit integers (what unpack_places gives), without numpy."""
    column = array(_CODES[4])
    column.frombytes(data)
    return column


__all__ = [
    "NOT_KEPT", "POSITIONS_MAX", "TERM_KEY", "Doc", "analysed", "doc_of", "native_column", "pack_places",
    "positions_of", "unpack_places", "unpack_places_twin", "unpacked",
]
