"""Recall's index in PostgreSQL's tables (docs/POSTGRES.md, "Recall"): `mnemo_docs`, a row for each live
record whose latest content is text (the seq of that version, which names the document, its record, scope
and length in terms); `mnemo_terms`, a row for each distinct term of each document (how often it holds
it and where it stands among the document's atoms, with the document's length and scope);
`mnemo_text_scopes`, each scope's number of documents and their total length.

The terms are mnemo.recall.analysis's, computed here in Python from the text the writer has in hand, so
that the index holds exactly what the file backend's does: a commit writes its documents' rows in its own
transaction (TextRows, put_text_columns), the migrations to schema versions 5 and 9 and a chain import
build them from the payloads (build_text_index, build_positions, copy_text_index), verify compares them
with the chain (doc_of), and recall reads them through a Source over the rows of one statement
(TableSource), which also decides phrases from the positions (TableSource.phrase).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate
from typing import TYPE_CHECKING, Any, NamedTuple

from ..._native import speedups
from ...chain.codec import SALT_SIZE, served_put_problem
from ...recall._numpy import installed, np
from ...recall.analysis import atoms, counted
from ...recall.bm25 import K1, B
from ...recall.engine import distinct
from ..recall import searchable_text

if TYPE_CHECKING:
    from numpy.typing import NDArray

TERM_KEY = 256
"""The characters of a term that mnemo_terms' index orders by: a B-tree entry holds at most about 2.7 kB,
and a word of a text can be longer. A lookup compares the whole term after the index found its first
TERM_KEY characters."""

BUILD_BATCH = 1000  # records read at a time while the index is built for the records already there
COUNT_SCOPES = (
    "INSERT INTO mnemo_text_scopes (scope, docs, length) SELECT scope, count(*), sum(length) FROM mnemo_docs "
    "GROUP BY scope"
)


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


class TextRows:
    """The rows a commit writes to the text index, as the arrays mnemo_index_text takes: the documents
    that come in (seq, id, scope, length) and their terms (term, the document's position from 1, tf,
    positions)."""

    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.ids: list[str] = []
        self.scopes: list[str] = []
        self.lengths: list[int] = []
        self.terms: list[str] = []
        self.docs: list[int] = []
        self.tfs: list[int] = []
        self.positions: list[bytes | None] = []
        self.size = 0  # the bytes of its terms, about

    def add(self, seq: int, rec_id: str, scope: str, doc: Doc) -> None:
        self.seqs.append(seq)
        self.ids.append(rec_id)
        self.scopes.append(scope)
        self.lengths.append(doc.length)
        k = len(self.ids)
        for term, tf in doc.counts.items():
            places = doc.positions[term]
            self.terms.append(term)
            self.docs.append(k)
            self.tfs.append(tf)
            self.positions.append(places)
            self.size += len(term) + 8 + (len(places) if places is not None else 0)

    def columns(self, gone: list[str], gone_seqs: list[int]) -> list[Any]:
        """mnemo_index_text's arguments, with the records whose documents leave and their versions."""
        return [gone, gone_seqs, self.seqs, self.ids, self.scopes, self.lengths, self.terms, self.docs, self.tfs,
                self.positions]


def put_text_columns(payloads: Iterable[bytes]) -> list[Any]:
    """mnemo_put's text index arrays for new records' puts, given their payloads in order: d_put, d_len
    (the put, from 1, and the length of each document) and w_term, w_doc, w_tf, w_pos (each of their
    terms, with its document's position in d_put, and its positions)."""
    d_put: list[int] = []
    d_len: list[int] = []
    w_term: list[str] = []
    w_doc: list[int] = []
    w_tf: list[int] = []
    w_pos: list[bytes | None] = []
    for k, payload in enumerate(payloads, 1):
        doc = doc_of(payload[SALT_SIZE:])
        if doc is None:
            continue
        d_put.append(k)
        d_len.append(doc.length)
        for term, tf in doc.counts.items():
            w_term.append(term)
            w_doc.append(len(d_put))
            w_tf.append(tf)
            w_pos.append(doc.positions[term])
    return [d_put, d_len, w_term, w_doc, w_tf, w_pos]


def build_text_index(conn: Any) -> None:
    """Index the latest version of every live record, read from its payload (the migration to schema
    version 5, on the psycopg connection of the migrating transaction). A payload that is missing or that
    is not the one its put's entry commits to is not indexed: verify names it, and reads refuse it."""
    after: str | None = None
    while True:
        rows = conn.execute(
            "SELECT r.id, r.scope, v.ver, v.seq, v.hash, e.raw, p.payload FROM mnemo_records r "
            "JOIN mnemo_versions v ON v.id = r.id AND v.ver = r.ver "
            "LEFT JOIN mnemo_entries e ON e.seq = v.seq LEFT JOIN mnemo_payloads p ON p.seq = v.seq "
            "WHERE %s::text IS NULL OR r.id > %s ORDER BY r.id LIMIT %s",
            [after, after, BUILD_BATCH], binary=True,
        ).fetchall()
        if not rows:
            break
        with conn.cursor() as cur:
            copy_text_index(cur, _readable_docs(rows), positions=False)  # (version 9 writes them)
        after = rows[-1][0]
    conn.execute(COUNT_SCOPES)


def build_positions(conn: Any) -> None:
    """Write the terms of every document of the text index again, with their positions (the migrations to
    schema versions 9 and 11, on the psycopg connection of the migrating transaction), from the payload of each
    document's version, checked as build_text_index checks it: a document whose payload is gone or is not
    the one its put's entry commits to keeps no terms (verify names it)."""
    conn.execute("DELETE FROM mnemo_terms")
    after = -1
    while True:
        rows = conn.execute(
            "SELECT d.id, d.scope, v.ver, d.seq, v.hash, e.raw, p.payload FROM mnemo_docs d "
            "JOIN mnemo_versions v ON v.seq = d.seq LEFT JOIN mnemo_entries e ON e.seq = d.seq "
            "LEFT JOIN mnemo_payloads p ON p.seq = d.seq WHERE d.seq > %s ORDER BY d.seq LIMIT %s",
            [after, BUILD_BATCH], binary=True,
        ).fetchall()
        if not rows:
            break
        with conn.cursor() as cur:
            _copy_terms(cur, _readable_docs(rows), positions=True)
        after = rows[-1][3]


def _readable_docs(rows: list[Any]) -> list[tuple[int, str, str, Doc]]:
    out: list[tuple[int, str, str, Doc]] = []
    for rec_id, scope, ver, seq, chain_hash, raw, payload in rows:
        if raw is None or payload is None:
            continue
        if served_put_problem(bytes(raw), bytes(chain_hash), rec_id, ver, scope, bytes(payload)) is not None:
            continue
        doc = doc_of(bytes(payload)[SALT_SIZE:])
        if doc is not None:
            out.append((seq, rec_id, scope, doc))
    return out


def copy_text_index(cur: Any, docs: Iterable[tuple[int, str, str, Doc]], positions: bool = True) -> None:
    """Write the rows of these documents, each (seq, id, scope, document), by COPY on the psycopg cursor
    (without `positions`, the terms' as schema version 5 has them); the scopes' totals are the caller's
    to count (COUNT_SCOPES) once every document is in."""
    docs = list(docs)
    with cur.copy("COPY mnemo_docs (seq, id, scope, length) FROM STDIN") as out:
        for seq, rec_id, scope, doc in docs:
            out.write_row((seq, rec_id, scope, doc.length))
    _copy_terms(cur, docs, positions)


def _copy_terms(cur: Any, docs: list[tuple[int, str, str, Doc]], positions: bool) -> None:
    if not positions:
        with cur.copy("COPY mnemo_terms (term, seq, tf, length, scope) FROM STDIN") as out:
            for seq, _rec_id, scope, doc in docs:
                for term, tf in doc.counts.items():
                    out.write_row((term, seq, tf, doc.length, scope))
        return
    with cur.copy("COPY mnemo_terms (term, seq, tf, length, scope, positions) FROM STDIN") as out:
        for seq, _rec_id, scope, doc in docs:
            for term, tf in doc.counts.items():
                out.write_row((term, seq, tf, doc.length, scope, doc.positions[term]))


class IndexDisagrees(ValueError):
    """The text index's rows contradict themselves (terms held in a corpus whose totals say it holds no
    document, or no term): they were changed behind the store's back."""


def unpacked(data: bytes, width: int) -> array[int]:
    """The integers of a column packed as recall_sql packs them (int8send or int4send of each: `width`
    bytes, big-endian), without numpy."""
    column = array(_CODES[width])
    column.frombytes(data)
    if sys.byteorder == "little":
        column.byteswap()
    return column


_CODES = {8: "q", 4: next(code for code in "ilh" if array(code).itemsize == 4)}


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
                    ends = list(accumulate(max(0, n) for n in _native_column(counts)))
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


Places = dict[str, tuple[bytes, bytes, bytes, bytes]]  # each atom's: TableSource._places


def _native_column(data: bytes) -> array[int]:
    """A column of native 32-bit integers (what unpack_places gives), without numpy."""
    column = array(_CODES[4])
    column.frombytes(data)
    return column


def phrase_starts(atoms: tuple[str, ...], places: Places) -> tuple[dict[int, int], list[int], dict[int, int]]:
    """TableSource.phrase's answer from its atoms' places: the starts in each document holding the phrase,
    the documents holding every atom with one whose positions are not kept, and the lengths of both (those
    of the first atom's postings). The C extension decides it in one pass (mnemo/_speedups.c,
    phrase_starts: each document of the atom of fewest postings looked up in the others' by a table of
    their seqs; fuzzed against _phrase_python); without it numpy does in bulk (_phrase_numpy), or
    _phrase_python one document at a time."""
    if speedups is not None:
        native: tuple[dict[int, int], list[int], dict[int, int]] | None = speedups.phrase_starts(
            tuple(places[atom] for atom in atoms))
        if native is not None:
            return native
    return (_phrase_numpy if installed() else _phrase_python)(atoms, places)


def _phrase_python(atoms: tuple[str, ...], places: Places) -> tuple[dict[int, int], list[int], dict[int, int]]:
    """TableSource.phrase, one document at a time (what runs without numpy); the lengths are those of
    every posting, the first atom's where two disagree (rows written by hand)."""
    by_atom: dict[str, dict[int, set[int] | None]] = {}
    lengths: dict[int, int] = {}
    for atom, (seqs, counts, packed, packed_lengths) in places.items():
        for seq, length in zip(unpacked(seqs, 8), unpacked(packed_lengths, 4), strict=True):
            lengths.setdefault(seq, length)
        where: dict[int, set[int] | None] = {}
        positions = _native_column(packed)
        at = 0
        for seq, count in zip(unpacked(seqs, 8), _native_column(counts), strict=True):
            if count < 0:
                where[seq] = None  # not kept: the text says
            else:
                where[seq] = set(positions[at:at + count])
            at += max(0, count)
        by_atom[atom] = where
    lists = sorted(by_atom.values(), key=len)
    found: dict[int, int] = {}
    unknown: list[int] = []
    for seq in lists[0]:
        if not all(seq in other for other in lists[1:]):
            continue
        held = [by_atom[atom][seq] for atom in atoms]
        kept = [places_ for places_ in held if places_ is not None]
        if len(kept) < len(held):
            unknown.append(seq)
            continue
        starts = sum(1 for start in kept[0] if all(start + k in other for k, other in enumerate(kept[1:], 1)))
        if starts:
            found[seq] = starts
    return found, unknown, lengths


DENSE = 16
"""A phrase's starts are found in a table of a bit per (document, position) when it has at most this
many entries per position read (and 2^20 more), else by sorting the positions."""


def _phrase_numpy(atoms: tuple[str, ...], places: Places) -> tuple[dict[int, int], list[int], dict[int, int]]:
    """TableSource.phrase in bulk: each atom's positions as numbers (document, position) over the documents
    of the atoms' postings; the starts of the first atom kept where the next atom follows, and so on."""
    columns = {}
    for atom, (seqs, packed_counts, packed, _lengths) in places.items():
        counts_ = np.frombuffer(packed_counts, dtype=np.int32).astype(np.int64)
        kept = counts_ >= 0
        columns[atom] = (np.frombuffer(seqs, dtype=">i8").astype(np.int64), kept,
                         np.where(kept, counts_, 0), np.frombuffer(packed, dtype=np.int32).astype(np.int64))
    every, at = distinct(np.concatenate([keys for keys, _kept, _counts, _positions in columns.values()]))
    holding = np.zeros(len(every), dtype=np.int64)
    unknown = np.zeros(len(every), dtype=np.bool_)
    start = 0
    for keys, kept, _counts, _positions in columns.values():
        mine = at[start:start + len(keys)]
        start += len(keys)
        held = np.bincount(mine, minlength=len(every))
        if len(held) and int(held.max()) > 1:
            return _phrase_python(atoms, places)  # a document twice in an atom's postings (rows written by hand)
        holding += held
        unknown[mine[~kept]] = True
    full = holding == len(columns)
    unknown &= full
    width = len(atoms)
    top = max((int(positions.max()) for *_rest, positions in columns.values() if len(positions)), default=0)
    span = top + width + 1  # a start and the places after it, never into the next document's numbers
    start = 0
    numbers: dict[str, NDArray[np.int64]] = {}
    total = 0
    for atom, (keys, _kept, counts, positions) in columns.items():
        mine = at[start:start + len(keys)]
        start += len(keys)
        docs = np.repeat(mine, counts)
        valid = positions >= 0
        numbers[atom] = docs[valid] * span + positions[valid]
        total += len(numbers[atom])
    if len(every) * span <= DENSE * total + (1 << 20):
        tables = {}
        for atom, found in numbers.items():
            table = np.zeros(len(every) * span, dtype=np.bool_)
            table[found] = True
            tables[atom] = table
        current = numbers[atoms[0]]
        if np.count_nonzero(tables[atoms[0]]) != len(current):  # a place twice (rows written by hand)
            current = np.flatnonzero(tables[atoms[0]])
        for k in range(1, width):
            current = current[tables[atoms[k]][current + k]]
    else:
        current = np.unique(numbers[atoms[0]])
        for k in range(1, width):
            current = current[np.isin(current + k, numbers[atoms[k]])]
    starts = np.bincount(current // span, minlength=len(every))
    chosen = np.flatnonzero((starts > 0) & full & ~unknown)
    either = np.flatnonzero(((starts > 0) & full) | unknown)
    lengths = np.zeros(len(every), dtype=np.int64)
    spans = list(zip(accumulate((len(seqs) // 8 for seqs, *_rest in places.values()), initial=0),
                     places.values(), strict=False))
    for first, (packed_seqs, *_places, packed_lengths) in reversed(spans):  # (the first atom's last)
        lengths[at[first:first + len(packed_seqs) // 8]] = np.frombuffer(packed_lengths, dtype=">i4")
    return (dict(zip(every[chosen].tolist(), starts[chosen].tolist(), strict=True)),
            every[np.flatnonzero(unknown)].tolist(),
            dict(zip(every[either].tolist(), lengths[either].tolist(), strict=True)))


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


__all__ = [
    "BUILD_BATCH", "BULK", "COUNT_SCOPES", "POSITIONS_MAX", "Doc", "IndexDisagrees", "TERM_KEY", "TableSource",
    "TextRows", "NOT_KEPT", "build_positions", "build_text_index", "copy_text_index", "doc_of", "pack_places",
    "positions_of", "phrase_starts", "put_text_columns", "unpack_places", "unpack_places_twin", "unpacked",
]
