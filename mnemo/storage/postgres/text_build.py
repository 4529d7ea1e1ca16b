"""The text index (text_index.py) built for records already there, from their payloads: by the migrations
to schema versions 5, 9 and 11 (build_text_index, build_positions, on the migrating transaction's
connection) and by a chain import (copy_text_index, then COUNT_SCOPES)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...chain.codec import SALT_SIZE, served_put_problem
from .text_index import Doc, doc_of

BUILD_BATCH = 1000  # records read at a time while the index is built for the records already there
COUNT_SCOPES = (
    "INSERT INTO mnemo_text_scopes (scope, docs, length) SELECT scope, count(*), sum(length) FROM mnemo_docs "
    "GROUP BY scope"
)


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


__all__ = ["BUILD_BATCH", "COUNT_SCOPES", "build_positions", "build_text_index", "copy_text_index"]
