"""A new PostgreSQL database written from a whole chain (mnemo.storage.chain_copy), in one transaction:
the schema, the entries and payloads as they are (COPY), and the derived tables replayed from them (the
text index's from the live records' latest payloads). It appears whole or not at all, and never over an
existing Mnemo database."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import psycopg

from ...acl import Acl
from ...chain.codec import ZERO_HASH, decode_put_payload, decode_record_fields
from ...errors import InvalidInput, MnemoError
from ..batch import ACL_OPS, Batch, apply_entry
from ..types import ChainItem, Progress, Rec
from . import schema
from .dsn import display_name, dsn_params
from .errors import storage_error
from .schema import SCHEMA_LOCK
from .sql import RECORD_COLUMNS
from .text_build import COUNT_SCOPES, copy_text_index
from .text_index import Doc, doc_of


class _Empty:
    acl = Acl()

    def get_rec(self, rec_id: str) -> Rec | None:
        return None


def write_chain(dsn: str, items: Iterable[ChainItem], progress: Progress | None = None, total: int = 0) -> None:
    name = display_name(dsn)
    dsn_params(dsn)
    try:
        with psycopg.connect(dsn, autocommit=False, connect_timeout=10) as conn:
            _write(conn, name, items, progress, total)
    except psycopg.Error as exc:
        raise storage_error(exc, name) from None


def _write(conn: psycopg.Connection[Any], name: str, items: Iterable[ChainItem], progress: Progress | None,
           total: int) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(current_schema() || %s))", [SCHEMA_LOCK])
    exists = conn.execute("SELECT to_regclass('mnemo_meta') IS NOT NULL").fetchone()
    if exists and exists[0]:
        raise InvalidInput(f"{name} already holds a Mnemo database: a copy is written only to a new one")
    schema.migrate(conn, 0)
    replay = Batch(_Empty(), (-1, ZERO_HASH, 0), transactional=True)
    forgotten: set[str] = set()
    db_id = b""
    last = None
    acl_seq = 0
    done = 0
    with conn.cursor() as cur:
        with cur.copy("COPY mnemo_entries (seq, op, raw, hash) FROM STDIN") as entries:
            payload_rows: list[tuple[int, bytes, bytes]] = []
            for item in items:
                e = item.entry
                entries.write_row((e.seq, e.op, e.raw, e.hash))
                tags: tuple[str, ...] = ()
                if item.payload is not None:
                    payload_rows.append((e.seq, e.raw, item.payload))
                    if e.op == "put":
                        tags = decode_record_fields(decode_put_payload(item.payload)[1])[1]
                if e.seq == 0:
                    db_id = e.body["db_id"]
                else:
                    apply_entry(replay, e, e.seq, 0 if item.payload is None else len(item.payload), tags, e.seq)
                if e.op == "forget":
                    forgotten.update(e.body["ids"])
                if e.op in ACL_OPS:
                    acl_seq = e.seq
                last = e
                done += 1
                if progress is not None and done % 4096 == 0:
                    progress(done, total)
        if last is None:
            raise MnemoError("the source holds no entries")
        with cur.copy("COPY mnemo_payloads (seq, raw, payload) FROM STDIN") as payloads:
            for row in payload_rows:
                payloads.write_row(row)
        live = [r for r in replay.recs.values() if r is not None]
        for r in live:
            _check_text(r, name)
        copies = {seq: (raw, payload) for seq, raw, payload in payload_rows}
        with cur.copy(f"COPY mnemo_records ({RECORD_COLUMNS}, raw, payload) FROM STDIN") as records:
            for r in live:
                v = r.latest
                records.write_row((r.id, r.scope, v.ver, v.seq, v.ts_ns, v.agent, v.size, v.hash, v.entry_len,
                                   v.slot_len, *copies[v.seq]))
        with cur.copy("COPY mnemo_versions (id, ver, seq, ts_ns, agent, size, hash, entry_len, payload_len) "
                      "FROM STDIN") as versions:
            for r in live:
                for v in r.versions:
                    versions.write_row((r.id, v.ver, v.seq, v.ts_ns, v.agent, v.size, v.hash, v.entry_len, v.slot_len))
        with cur.copy("COPY mnemo_tags (tag, id) FROM STDIN") as tag_rows:
            for r in live:
                for tag in r.tags:
                    tag_rows.write_row((tag, r.id))
        with cur.copy("COPY mnemo_forgotten (id) FROM STDIN") as gone:
            for rec_id in sorted(forgotten):
                gone.write_row((rec_id,))
        copy_text_index(cur, _documents(live, {seq: payload for seq, (_raw, payload) in copies.items()}))
    conn.execute(COUNT_SCOPES)
    conn.execute("INSERT INTO mnemo_meta (schema_version, db_id) VALUES (%s, %s)", [schema.SCHEMA_VERSION, db_id])
    conn.execute("INSERT INTO mnemo_head (seq, hash, ts_ns, acl_seq) VALUES (%s, %s, %s, %s)",
                 [last.seq, last.hash, last.ts_ns, acl_seq])
    conn.commit()
    if progress is not None:
        progress(done, total or done)


def _documents(live: list[Rec], payload_of: dict[int, bytes]) -> Iterator[tuple[int, str, str, Doc]]:
    """The text index's documents of the live records: each one's latest version, if its content is
    text (its payload decoded as the tags were)."""
    for rec in live:
        payload = payload_of.get(rec.latest.seq)
        doc = None if payload is None else doc_of(decode_put_payload(payload)[1])
        if doc is not None:
            yield rec.latest.seq, rec.id, rec.scope, doc


def _check_text(rec: Rec, name: str) -> None:
    """Refuse, naming it, a live record whose id, scope, tags or agents hold a NUL character: PostgreSQL's
    text cannot store one. Mnemo refuses such tags and names at write time, but a file database written
    before it did may hold a tag with one. Raised inside the copy's transaction: nothing is written."""
    fields = [("id", rec.id), ("scope", rec.scope)]
    fields += [("tag", tag) for tag in rec.tags]
    fields += [(f"version {v.ver}'s agent", v.agent) for v in rec.versions]
    for what, value in fields:
        if "\x00" in value:
            fix = "forget it"
            if what == "tag":
                fix = "give the record tags without it (update(id, tags=...)) or forget it"
            raise InvalidInput(
                f"record {rec.id!r} (scope {rec.scope!r}) has the {what} {value!r}, which holds a NUL character "
                f"(U+0000): PostgreSQL cannot store it, so nothing was written to {name}. In the source, {fix}; "
                "then copy again"
            )


__all__ = ["write_chain"]
