"""Recall's index in PostgreSQL's tables (docs/POSTGRES.md, "Recall"): `mnemo_docs`, a row for each live
record whose latest content is text (the seq of that version, which names the document, its record, scope
and length in terms); `mnemo_terms`, a row for each distinct term of each document (how often it holds
it, with the document's length and scope); `mnemo_text_scopes`, each scope's number of documents and their total length.

The terms are mnemo.recall.analysis's, computed here in Python from the text the writer has in hand, so
that the index holds exactly what the file backend's does: a commit writes its documents' rows in its own
transaction (TextRows, put_text_columns), the migration to schema version 5 and a chain import build
them from the payloads (build_text_index, copy_text_index), verify compares them with the chain
(doc_of), and recall reads them through a Source over the rows of one statement (TableSource).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from ...chain.codec import SALT_SIZE, served_put_problem
from ...recall._numpy import np
from ...recall.analysis import counted
from ...recall.bm25 import K1, B
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


class Doc(NamedTuple):
    """A document: its length in terms, and how often it holds each distinct term."""

    length: int
    counts: dict[str, int]


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
    return Doc(*counted(text))


class TextRows:
    """The rows a commit writes to the text index, as the arrays mnemo_index_text takes: the documents
    that come in (seq, id, scope, length) and their terms (term, the document's position from 1, tf)."""

    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.ids: list[str] = []
        self.scopes: list[str] = []
        self.lengths: list[int] = []
        self.terms: list[str] = []
        self.docs: list[int] = []
        self.tfs: list[int] = []
        self.size = 0  # the bytes of its terms, about

    def add(self, seq: int, rec_id: str, scope: str, doc: Doc) -> None:
        self.seqs.append(seq)
        self.ids.append(rec_id)
        self.scopes.append(scope)
        self.lengths.append(doc.length)
        k = len(self.ids)
        for term, tf in doc.counts.items():
            self.terms.append(term)
            self.docs.append(k)
            self.tfs.append(tf)
            self.size += len(term) + 8

    def columns(self, gone: list[str], gone_seqs: list[int]) -> list[Any]:
        """mnemo_index_text's arguments, with the records whose documents leave and their versions."""
        return [gone, gone_seqs, self.seqs, self.ids, self.scopes, self.lengths, self.terms, self.docs, self.tfs]


def put_text_columns(payloads: Iterable[bytes]) -> list[Any]:
    """mnemo_put's text index arrays for new records' puts, given their payloads in order: d_put, d_len
    (the put, from 1, and the length of each document) and w_term, w_doc, w_tf (each of their terms, with
    its document's position in d_put)."""
    d_put: list[int] = []
    d_len: list[int] = []
    w_term: list[str] = []
    w_doc: list[int] = []
    w_tf: list[int] = []
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
    return [d_put, d_len, w_term, w_doc, w_tf]


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
            copy_text_index(cur, _readable_docs(rows))
        after = rows[-1][0]
    conn.execute(COUNT_SCOPES)


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


def copy_text_index(cur: Any, docs: Iterable[tuple[int, str, str, Doc]]) -> None:
    """Write the rows of these documents, each (seq, id, scope, document), by COPY on the psycopg cursor;
    the scopes' totals are the caller's to count (COUNT_SCOPES) once every document is in."""
    docs = list(docs)
    with cur.copy("COPY mnemo_docs (seq, id, scope, length) FROM STDIN") as out:
        for seq, rec_id, scope, doc in docs:
            out.write_row((seq, rec_id, scope, doc.length))
    with cur.copy("COPY mnemo_terms (term, seq, tf, length, scope) FROM STDIN") as out:
        for seq, _rec_id, scope, doc in docs:
            for term, tf in doc.counts.items():
                out.write_row((term, seq, tf, doc.length, scope))


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
        self.exact = frozenset(exact)
        self.prefixes = tuple(prefixes)
        self._text = text
        for kind, name, a, b, seqs, tfs, lengths, terms, counts in rows:
            if kind == 1:  # every term's postings
                if terms is not None:
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
        self._check(term)
        span = self._spans.get(term)
        if span is None:
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


class _Seqs:
    """The seqs of documents named by their seqs."""

    def __getitem__(self, key: int, /) -> int:
        return key


__all__ = [
    "BUILD_BATCH", "COUNT_SCOPES", "Doc", "IndexDisagrees", "TERM_KEY", "TableSource", "TextRows", "build_text_index",
    "copy_text_index", "doc_of", "put_text_columns", "unpacked",
]
