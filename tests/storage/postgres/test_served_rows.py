"""The checks of the rows a query reads on PostgreSQL in one call: mnemo/_pgread.c's served_rows against
its pure-Python twin sql.served_rows, on the rows of a real database and on rows made to fail each
check; a damaged payload is refused with the same error whichever serves the others; a brief fuzzing run
compares them on mutated inputs. Under MNEMO_PURE_PYTHON=1 the C extension is not loaded: the tests that
call it are skipped, and the rest run on the twin."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from helpers.native_fuzz import fuzz
from helpers.pg import Schema
from helpers.pg_faults import damage_payload

from mnemo import IntegrityError, MnemoClient
from mnemo._native import pgread
from mnemo.chain.codec import make_entry, pack_record_fields, payload_digest
from mnemo.storage.postgres import reads as pg_reads
from mnemo.storage.postgres.sql import served_rows
from mnemo.storage.types import Query

OWNER = "owner"
COLUMNS = (0, 1, 2, 3, 4, 5)  # (id, scope, ver, hash, raw, payload)
native = pytest.mark.skipif(pgread is None, reason="the C extension is not loaded (MNEMO_PURE_PYTHON or no build)")


def _rows_read(c: MnemoClient, query: dict[str, Any]) -> list[Any]:
    """The rows the store's select read for `query` (of the statement that reads the records; a client's
    query reads them through latest_records, test_latest_records.py)."""
    store: Any = c._store
    fetch, read = store._fetch, []

    def spy(sql: str, params: Any = None, conn: Any = None, binary: bool = False) -> Any:
        rows = fetch(sql, params, conn, binary)
        if "mnemo_versions" in sql:
            read.append(rows)
        return rows

    store._fetch = spy
    try:
        store.select(Query(**query), c._scopes())
    finally:
        del store._fetch
    return read[-1]


def _fill(c: MnemoClient) -> list[str]:
    ids = [c.remember("alone", tags=["a"]).id,
           c.remember(bytes(range(256)), tags=["a", "b"], metadata={"k": [1, 2.5]}).id]
    with c.transaction() as tx:
        ids += [tx.remember(f"one of three ✓ {i}", tags=["a", f"t{i}"], scope="team:ü").id for i in range(3)]
    c.update(ids[1], content="its second version", tags=["a", "again"])
    ids.append(c.remember("x" * 70_000, tags=["a"]).id)  # a payload longer than str16's header can say
    return ids


@native
def test_the_c_checks_serve_what_the_twin_serves_from_a_real_database(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER) as c:
        _fill(c)
        rows = _rows_read(c, {"tags": ("a",)})
    cols = pg_reads.SERVED_COLUMNS
    want = served_rows(rows, cols)
    assert len(rows) == 7  # six records, one of them updated: its first version's row carries no payload
    assert [w is None for w in want] == [row[cols[4]] is None for row in rows]
    assert sum(w is not None for w in want) == 6
    assert pgread.served_rows(rows, cols) == want


def _put_row(body_extra: dict[str, Any], rec_id: str = "r1", ver: int = 1) -> tuple[Any, ...]:
    """The row of one put: (id, scope, ver, chain hash, entry bytes, payload)."""
    salt, packed = b"s" * 16, pack_record_fields("hello", ["t"], {})
    body = {"digest": payload_digest(salt, packed), "id": rec_id, "scope": "agent:a", "size": 5, "ver": 1,
            **body_extra}
    e = make_entry(3, 1_764_500_000_000_000_000, b"\x11" * 32, "put", "a", body)
    return ("r1", "agent:a", ver, hashlib.sha256(e.raw).digest(), e.raw, salt + packed)


def _checks() -> list[Any]:
    return [served_rows] + ([pgread.served_rows] if pgread is not None else [])


def test_a_put_in_the_canonical_layout_is_served() -> None:
    for check in _checks():
        assert check([_put_row({})], COLUMNS) == [pack_record_fields("hello", ["t"], {})]


@native
def test_a_put_in_another_layout_is_left_to_the_general_path() -> None:
    """An entry whose body holds a key no put is written with decodes all the same, and the twin serves
    it; the C check does not read that layout and answers None, so the general path (_checked, the
    twin's checks) decides."""
    row = _put_row({"note": "extra"})
    assert pgread.served_rows([row], COLUMNS) == [None]
    assert served_rows([row], COLUMNS) == [pack_record_fields("hello", ["t"], {})]


def test_every_check_that_fails_is_none() -> None:
    good = _put_row({})
    rec_id, scope, ver, chain_hash, raw, payload = good
    bad = [
        (rec_id, scope, ver, chain_hash, None, None),  # an older version's row: no entry, no payload
        (rec_id, scope, ver, chain_hash, raw, None),
        (rec_id, scope, ver, chain_hash, None, payload),
        (rec_id, scope, ver, chain_hash[:31] + b"\0", raw, payload),  # the entry does not hash to it
        (rec_id, scope, ver, chain_hash[:31], raw, payload),  # no chain hash at all
        (rec_id, "agent:b", ver, chain_hash, raw, payload),  # the put of another scope
        ("r2", scope, ver, chain_hash, raw, payload),  # of another record
        (rec_id, scope, 2, chain_hash, raw, payload),  # of another version
        (rec_id, scope, ver, chain_hash, raw, payload[:-1] + b"\xc0"),  # a payload its digest does not commit to
        (rec_id, scope, ver, chain_hash, raw, payload[:16]),  # a salt and nothing after it
        ("r\ud800", scope, ver, chain_hash, raw, payload),  # an id no entry can name
        _put_row({}, rec_id="r2"),  # an entry of another record, hashing to its chain hash
    ]
    for check in _checks():
        assert check([*bad, good], COLUMNS) == [None] * len(bad) + [pack_record_fields("hello", ["t"], {})]


@native
def test_what_is_not_a_list_of_tuples_of_the_columns_is_refused() -> None:
    with pytest.raises(TypeError, match="each row must be a tuple"):
        pgread.served_rows([["r1", "agent:a", 1, b"", b"", b""]], COLUMNS)
    with pytest.raises(IndexError, match="a column index is past the end of a row"):
        pgread.served_rows([_put_row({})], (0, 1, 2, 3, 4, 6))
    with pytest.raises(IndexError, match="a column index is negative"):
        pgread.served_rows([_put_row({})], (0, 1, 2, 3, 4, -1))
    with pytest.raises(TypeError):
        pgread.served_rows((_put_row({}),), COLUMNS)


def test_a_damaged_payload_is_refused_with_the_same_error_beside_served_ones(pg: Schema) -> None:
    """A payload rewritten past the triggers (as a superuser who disables them can) fails the query that
    reads it, whichever check served the records beside it."""
    with MnemoClient(pg.url, OWNER) as c:
        ids = _fill(c)
        seq = c.get(ids[0]).seq
        message = damage_payload(pg, c._store.path, seq)
        with pytest.raises(IntegrityError) as info:
            c.query(tags=["a"])
        assert str(info.value) == message
        with pytest.raises(IntegrityError) as info:
            c.get(ids[0])
        assert str(info.value) == message
        assert [r.id for r in c.query(tags=["b"])] == []  # its second version holds no "b"
        assert len(c.query(tags=["again"])) == 1


@pytest.mark.slow  # with the sanitized build it needs; .ci/run runs it (-m slow)
def test_the_row_checks_survive_a_brief_fuzzing_run(tmp_path: Path) -> None:
    """served_rows and latest_records against their twins (tools/fuzz_native.py, target pgread)."""
    if pgread is None:
        pytest.skip("the C extension is not loaded (MNEMO_PURE_PYTHON or no build)")
    guided, sanitized = fuzz(tmp_path, 300, 300, "pgread", unit="runs")
    assert guided.runs >= 300 and sanitized.runs >= 300
