"""Recall's index in PostgreSQL's tables (docs/POSTGRES.md, "Recall"): `mnemo_docs`, a row for each live
record whose latest content is text (its scope, the seq of that version, its length in terms), and
`mnemo_terms`, a row for each distinct term of each such document (how often it holds it).

The terms are mnemo.recall.analysis's, computed here in Python from the text the writer has in hand, so
that the index holds exactly what the file backend's does: a commit writes its documents' rows in its own
transaction (TextRows, put_text_columns), the migration to schema version 5 and a chain import build
them from the payloads (build_text_index, copy_text_index), verify compares them with the chain
(doc_of), and recall reads them through a Source over the rows of one statement (TableSource).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from ...chain.codec import SALT_SIZE, served_put_problem
from ...recall.analysis import terms as analysed_terms
from ..recall import searchable_text

TERM_KEY = 256
"""The characters of a term that mnemo_terms' index orders by: a B-tree entry holds at most about 2.7 kB,
and a word of a text can be longer. A lookup compares the whole term after the index found its first
TERM_KEY characters."""

BUILD_BATCH = 1000  # records read at a time while the index is built for the records already there


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
    found = analysed_terms(text)
    return Doc(len(found), dict(Counter(found)))


class TextRows:
    """The rows a commit writes to the text index, as the arrays mnemo_index_text takes: the documents
    that come in (id, scope, seq, length) and their terms (term, the document's position from 1, tf)."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.scopes: list[str] = []
        self.seqs: list[int] = []
        self.lengths: list[int] = []
        self.terms: list[str] = []
        self.docs: list[int] = []
        self.tfs: list[int] = []
        self.size = 0  # the bytes of its terms, about

    def add(self, rec_id: str, scope: str, seq: int, doc: Doc) -> None:
        self.ids.append(rec_id)
        self.scopes.append(scope)
        self.seqs.append(seq)
        self.lengths.append(doc.length)
        k = len(self.ids)
        for term, tf in doc.counts.items():
            self.terms.append(term)
            self.docs.append(k)
            self.tfs.append(tf)
            self.size += len(term) + 8

    def columns(self, gone: list[str]) -> list[Any]:
        """mnemo_index_text's arguments, with the records whose documents leave."""
        return [gone, self.ids, self.scopes, self.seqs, self.lengths, self.terms, self.docs, self.tfs]


def put_text_columns(payloads: Iterable[bytes]) -> tuple[list[Any], int]:
    """mnemo_put's text index arrays for new records' puts, given their payloads in order (d_put, d_len,
    w_term, w_put, w_tf), and the bytes of their terms, about."""
    d_put: list[int] = []
    d_len: list[int] = []
    w_term: list[str] = []
    w_put: list[int] = []
    w_tf: list[int] = []
    size = 0
    for k, payload in enumerate(payloads, 1):
        doc = doc_of(payload[SALT_SIZE:])
        if doc is None:
            continue
        d_put.append(k)
        d_len.append(doc.length)
        for term, tf in doc.counts.items():
            w_term.append(term)
            w_put.append(k)
            w_tf.append(tf)
            size += len(term) + 8
    return [d_put, d_len, w_term, w_put, w_tf], size


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
            return
        with conn.cursor() as cur:
            copy_text_index(cur, _readable_docs(rows))
        after = rows[-1][0]


def _readable_docs(rows: list[Any]) -> list[tuple[str, str, int, Doc]]:
    out: list[tuple[str, str, int, Doc]] = []
    for rec_id, scope, ver, seq, chain_hash, raw, payload in rows:
        if raw is None or payload is None:
            continue
        if served_put_problem(bytes(raw), bytes(chain_hash), rec_id, ver, scope, bytes(payload)) is not None:
            continue
        doc = doc_of(bytes(payload)[SALT_SIZE:])
        if doc is not None:
            out.append((rec_id, scope, seq, doc))
    return out


def copy_text_index(cur: Any, docs: Iterable[tuple[str, str, int, Doc]]) -> None:
    """Write the rows of these documents, each (id, scope, seq, document), by COPY on the psycopg cursor."""
    docs = list(docs)
    with cur.copy("COPY mnemo_docs (id, scope, seq, length) FROM STDIN") as out:
        for rec_id, scope, seq, doc in docs:
            out.write_row((rec_id, scope, seq, doc.length))
    with cur.copy("COPY mnemo_terms (term, id, tf) FROM STDIN") as out:
        for rec_id, _scope, _seq, doc in docs:
            for term, tf in doc.counts.items():
                out.write_row((term, rec_id, tf))


class IndexDisagrees(ValueError):
    """The text index's rows contradict themselves (a term held by a document of no terms): they were
    changed behind the store's back."""


class TableSource:
    """A Source (mnemo.recall.engine) over the rows of one read of the index (sql.recall_sql), all taken
    in one snapshot: the corpus's totals, its documents holding the query's terms and the terms its
    prefixes reach (with their lengths, seqs, and whether their tag rows match the query's tags), those
    terms' postings, and the documents of the records an open transaction changed. A document is named
    by its record's id; its text is read by `text(id, seq indexed)` (for phrases)."""

    def __init__(self, rows: Iterable[tuple[Any, ...]], exact: Iterable[str], prefixes: Iterable[str],
                 text: Callable[[str, int], str]) -> None:
        self.n_docs = self.total = 0
        self.docs: dict[str, tuple[int, int]] = {}  # id -> (length, seq)
        self.tagged: set[str] = set()  # the documents whose tag rows match the query's tags
        self.touched: set[str] = set()  # the documents of records the open transaction changed
        self.by_term: dict[str, dict[str, int]] = {}
        self.exact = frozenset(exact)
        self.prefixes = tuple(prefixes)
        self._text = text
        for kind, name, rec_id, x, y, tagged in rows:
            if kind == 0:
                self.n_docs, self.total = int(x), int(y)
            elif kind == 1:
                self.docs[name] = (int(x), int(y))
                if tagged:
                    self.tagged.add(name)
            elif kind == 2:
                self.by_term.setdefault(name, {})[rec_id] = int(x)
            else:
                self.docs[name] = (int(x), int(y))
                self.touched.add(name)
        if self.by_term and self.total <= 0:
            raise IndexDisagrees("a term is held by documents whose lengths sum to 0")

    def totals(self) -> tuple[int, int]:
        return self.n_docs, self.total

    def postings(self, term: str) -> dict[str, int]:
        if term not in self.exact and not term.startswith(self.prefixes):
            raise LookupError(f"the postings of {term!r} were not read")  # the read names every term recall asks for
        return self.by_term.get(term, {})

    def expand(self, prefix: str) -> list[str]:
        if prefix not in self.prefixes:
            raise LookupError(f"the terms of prefix {prefix!r} were not read")
        return sorted(term for term in self.by_term if term.startswith(prefix))

    def length(self, key: str) -> int:
        return self.docs[key][0]

    def seq(self, key: str) -> int:
        return self.docs[key][1]

    def text(self, key: str) -> str:
        return self._text(key, self.docs[key][1])


__all__ = [
    "BUILD_BATCH", "Doc", "IndexDisagrees", "TERM_KEY", "TableSource", "TextRows", "build_text_index",
    "copy_text_index", "doc_of", "put_text_columns",
]
