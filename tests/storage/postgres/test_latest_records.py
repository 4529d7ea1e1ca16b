"""A query's and a get's records on PostgreSQL read, checked and built in one call: mnemo/_pgread.c's
latest_records against its pure-Python twin sql.latest_records, on the rows of a real database and on
rows made to fail each check or to hold what the C decoder leaves to the general path; the records
served are those the general path (select, get, and the client's build) makes, and a row the call does
not build is read again by it, which says what is wrong. Under MNEMO_PURE_PYTHON=1 the C extension is
not loaded: the tests that call it are skipped, and the rest run on the twin."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from helpers.pg import Schema
from helpers.pg_faults import damage_payload

from mnemo import IntegrityError, MnemoClient
from mnemo._native import pgread
from mnemo.chain.codec import make_entry, pack_record_fields, packb, payload_digest, seal_put_payload
from mnemo.record import MemoryRecord
from mnemo.storage.postgres import reads as pg_reads
from mnemo.storage.postgres.sql import RECORD_ROW, latest_records, records_sql
from mnemo.storage.types import Query

OWNER = "owner"
# (id, scope, ver, hash, raw, payload, seq, ts, agent, first_ts) in the rows _row makes
COLUMNS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
TS = 1_764_500_000_123_456_789
native = pytest.mark.skipif(pgread is None, reason="the C extension is not loaded (MNEMO_PURE_PYTHON or no build)")


def _builds() -> list[Any]:
    return [latest_records] + ([pgread.latest_records] if pgread is not None else [])


def _row(content: Any = "hello", tags: Any = ("t",), metadata: Any = None, packed: bytes | None = None,
         ver: int = 1, first_ts: int | None = None, body_extra: dict[str, Any] | None = None) -> tuple[Any, ...]:
    """The row of one record's latest put, as records_sql reads it (in COLUMNS' order)."""
    salt = b"s" * 16
    packed = pack_record_fields(content, list(tags), metadata or {}) if packed is None else packed
    body = {"digest": payload_digest(salt, packed), "id": "r1", "scope": "agent:a", "size": 5, "ver": ver,
            **(body_extra or {})}
    e = make_entry(3, TS, b"\x11" * 32, "put", "a", body)
    return ("r1", "agent:a", ver, hashlib.sha256(e.raw).digest(), e.raw, salt + packed, 3, TS, "a", first_ts)


def test_a_record_is_built_as_the_client_builds_it() -> None:
    for build in _builds():
        row = _row("hello", ["t", "u"], {"k": [1, 2.5, None, True]})
        [record] = build([row], COLUMNS, MemoryRecord)
        assert record is not None
        assert (record.id, record.version, record.content, record.tags, record.metadata, record.scope,
                record.agent_id, record.seq) == ("r1", 1, "hello", ("t", "u"), {"k": [1, 2.5, None, True]},
                                                 "agent:a", "a", 3)
        assert record.created_at is record.updated_at
        assert record.updated_at.isoformat() == "2025-11-30T10:53:20.123456+00:00"
        assert record.hash == hashlib.sha256(row[4]).hexdigest()
        # a record of several versions: created when its first version was
        [later] = build([_row(ver=3, first_ts=TS - 86_400 * 10**9)], COLUMNS, MemoryRecord)
        assert later is not None and later.version == 3
        assert later.created_at.isoformat() == "2025-11-29T10:53:20.123456+00:00"


def test_every_check_that_fails_is_none() -> None:
    good = _row()
    rec_id, scope, ver, chain_hash, raw, payload, seq, ts, agent, first = good
    bad = [
        (rec_id, scope, ver, chain_hash, None, None, seq, ts, agent, first),  # no payload row
        (rec_id, scope, ver, chain_hash[:31] + b"\0", raw, payload, seq, ts, agent, first),  # another hash
        (rec_id, "agent:b", ver, chain_hash, raw, payload, seq, ts, agent, first),  # another scope's put
        ("r2", scope, ver, chain_hash, raw, payload, seq, ts, agent, first),  # another record's
        (rec_id, scope, 2, chain_hash, raw, payload, seq, ts, agent, first),  # another version's
        (rec_id, scope, ver, chain_hash, raw, payload[:-1] + b"\xc0", seq, ts, agent, first),  # digest fails
        (rec_id, scope, ver, chain_hash, raw, payload[:16], seq, ts, agent, first),  # a salt and nothing
        _row(packed=b"\x93\xa1x\x90"),  # two fields of three: not a record's fields
        _row(packed=pack_record_fields("x", [], {}) + b"\xc0"),  # bytes after the fields
    ]
    for build in _builds():
        got = build([*bad, good], COLUMNS, MemoryRecord)
        assert got[:-1] == [None] * len(bad)
        assert got[-1] is not None and got[-1].content == "hello"


@native
def test_what_the_c_decoder_leaves_to_the_general_path_is_none_there() -> None:
    """Fields msgpack decodes that no put of this version writes (a map key that is not a string), an
    entry in another layout, a time beyond what the C conversion takes: None from the C call, which the
    general path then reads again; the twin builds the first two as record_of does."""
    rows = [_row(packed=b"\x93\xa1x\x90\x81\x01\x02"), _row(body_extra={"note": "extra"})]
    assert pgread.latest_records(rows, COLUMNS, MemoryRecord) == [None, None]
    assert [r is not None for r in latest_records(rows, COLUMNS, MemoryRecord)] == [True, True]
    far = _row()[:7] + (2**63 - 1, "a", None)
    assert pgread.latest_records([far], COLUMNS, MemoryRecord) == [None]


@native
def test_what_is_not_a_list_of_tuples_of_the_columns_is_refused() -> None:
    with pytest.raises(TypeError, match="latest_records: each row must be a tuple"):
        pgread.latest_records([list(_row())], COLUMNS, MemoryRecord)
    with pytest.raises(IndexError, match="latest_records: a column index is past the end of a row"):
        pgread.latest_records([_row()], (0, 1, 2, 3, 4, 5, 6, 7, 8, 10), MemoryRecord)
    with pytest.raises(IndexError, match="latest_records: a column index is negative"):
        pgread.latest_records([_row()], (0, 1, 2, 3, 4, 5, 6, 7, 8, -1), MemoryRecord)
    with pytest.raises(TypeError):
        pgread.latest_records([_row()], COLUMNS, "not a type")


def _fill(c: MnemoClient) -> list[str]:
    ids = [c.remember("alone", tags=["a"]).id,
           c.remember(bytes(range(256)), tags=["a", "b"], metadata={"k": [1, 2.5], "n": {"deep": None}}).id]
    with c.transaction() as tx:
        ids += [tx.remember(f"one of three ✓ {i}", tags=["a", f"t{i}"], scope="team:ü").id for i in range(3)]
    c.update(ids[1], content="its second version", tags=["a", "again"])
    c.update(ids[1], metadata={"third": True})
    ids.append(c.remember("x" * 70_000, tags=["a"]).id)  # a payload longer than str16's header can say
    return ids


def test_the_records_served_are_those_of_the_general_path(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        ids = _fill(c)
        store: Any = c._store
        rows = store._fetch(records_sql("mnemo_records r", "true", ""), None, binary=True)
        assert [row[0] for row in rows] == sorted(ids)
        built = [build(rows, RECORD_ROW, MemoryRecord) for build in _builds()]
        general = c._latest_records(store.select(Query(), c._scopes()))
        assert all(b == general for b in built)
        assert c.query() == general
        assert [c.get(i) for i in sorted(ids)] == general
        assert [r.version for r in general] == [3 if r.id == ids[1] else 1 for r in general]
        assert c.get(ids[1]).created_at == c.history(ids[1])[0].created_at < c.get(ids[1]).updated_at


def test_a_put_whose_tags_do_not_match_is_left_out_and_the_limit_still_met(pg: Schema) -> None:
    """A tag row the chain does not give a record makes it a candidate only: the record built is left out,
    and a query with a limit is read again without it."""
    with MnemoClient(pg.url, OWNER) as c:
        first = c.remember("first", tags=["x"])
        planted = c.remember("planted", tags=["y"])
        third = c.remember("third", tags=["x"])
        pg.sql("INSERT INTO mnemo_tags (tag, id) VALUES ('x', %s)", [planted.id])
        ordered = sorted([first, planted, third], key=lambda r: r.id)
        want = [r for r in ordered if r.id != planted.id]
        assert c.query(tags=["x"]) == want
        assert c.query(tags=["x"], limit=2) == want
        assert c.query(tags=["x"], limit=1) == want[:1]


def test_a_put_that_holds_only_some_of_the_tags_asked_for_is_left_out_by_every_filter(pg: Schema) -> None:
    """Tag rows planted for a record whose put holds one of two tags, another tag, or no tag starting with
    the prefix asked for: each filter (every tag, any tag, a prefix, several at once) leaves it out."""
    with MnemoClient(pg.url, OWNER) as c:
        both = c.remember("both", tags=["x", "z"])
        only_x = c.remember("only x", tags=["x"])
        other = c.remember("other", tags=["w"])
        pg.sql("INSERT INTO mnemo_tags (tag, id) VALUES ('z', %s), ('y', %s), ('pre:a', %s)",
               [only_x.id, other.id, other.id])
        assert c.query(tags=["x", "z"]) == [both]
        assert c.query(tags=["z"]) == [both]
        assert c.query(any_tags=["y", "z"]) == [both]
        assert c.query(tag_prefix="pre:") == []
        assert c.query(tags=["x"], any_tags=["z"]) == [both]
        assert c.query(tags=["x"]) == sorted([both, only_x], key=lambda r: r.id)


def test_a_damaged_payload_fails_the_query_and_the_get_with_the_general_paths_error(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        ids = _fill(c)
        seq = c.get(ids[0]).seq
        why = damage_payload(pg, c._store.path, seq)
        for read in (lambda: c.query(tags=["a"]), lambda: c.get(ids[0])):
            with pytest.raises(IntegrityError) as refused:
                read()
            assert str(refused.value) == why
        assert c.get(ids[2]).content == "one of three ✓ 0"


def test_in_a_transaction_the_general_path_serves_the_staged_records(pg: Schema, monkeypatch: pytest.MonkeyPatch
                                                                     ) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        kept = c.remember("kept", tags=["a"])
        calls: list[int] = []
        native_build = pg_reads._latest_records

        def counted(rows: list[Any], cols: tuple[int, ...], record_type: type) -> list[Any]:
            calls.append(len(rows))
            return native_build(rows, cols, record_type)

        monkeypatch.setattr(pg_reads, "_latest_records", counted)
        with c.transaction() as tx:
            staged = tx.remember("staged", tags=["a"])
            assert tx.get(staged.id) == staged
            assert tx.query(tags=["a"]) == sorted([kept, staged], key=lambda r: r.id)
        assert calls == []
        assert c.query(tags=["a"]) == sorted([kept, staged], key=lambda r: r.id)
        assert calls == [2]


def test_a_put_whose_tags_are_not_strings_is_served_with_its_own_fields(pg: Schema) -> None:
    """Tags that do not read as strings (a list among them: no client writes one, a writer past the
    client could) are the put's own fields: the record is served as select serves it, not matched."""
    with MnemoClient(pg.url, OWNER) as c:
        fine = c.remember("fine", tags=["t"])
        digest, payload = seal_put_payload(b"s" * 16, packb(["odd", [[1], "t"], {}]))
        store: Any = c._store
        with store.writing() as batch:
            body = {"digest": digest, "id": "odd-tags", "scope": f"agent:{OWNER}", "size": 3, "ver": 1}
            batch.stage("put", OWNER, body, payload, ("t",), new_record=True, text="odd")
        served = {r.id: (r.content, r.tags) for r in c.query(tags=["t"])}
        assert served == {fine.id: ("fine", ("t",)), "odd-tags": ("odd", ([1], "t"))}
        assert c.get("odd-tags").tags == ([1], "t")
