"""The PostgreSQL backend's two commit paths at their edges: a remember's blind append (one call to
mnemo_put, the head row held only for the call) refused by the server, built by the server with other
bytes than Mnemo's, or cut off with the call in flight (the store asks whether it landed, and flushes
what did); its flush when other writes of the process are in progress; and a transaction's commit
(mnemo_commit) of a put whose id exists, which the server refuses."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from helpers.pg import Schema, with_database
from helpers.pg_faults import kill_at_append, spy_flushes
from helpers.waiting import wait_for

from mnemo import MnemoClient, StorageError
from mnemo.audit import read_chain
from mnemo.errors import IntegrityError
from mnemo.storage.postgres.store import PostgresStore

OWNER = "owner"
FIXED_ID = "0" * 31 + "1"


@pytest.fixture
def fixed_ids(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every new record gets the same id: the second remember's put names an id that exists (what a
    colliding id, or another writer's put of it, does)."""
    import mnemo.client.writes as writes_module

    monkeypatch.setattr(writes_module, "new_id", lambda: FIXED_ID)
    yield
    monkeypatch.undo()


@pytest.fixture
def flushes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    return spy_flushes(monkeypatch)


def _chain_ids(pg: Schema) -> list[str]:
    return [item.entry.body["id"] for item in read_chain(pg.url) if item.entry.op == "put"]


def _lock_out(pg: Schema) -> None:
    """The database refuses new connections, as a server going down would."""
    with psycopg.connect(with_database(pg.database.server, "postgres"), autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{pg.database.name}" ALLOW_CONNECTIONS false')


def _allow_connections(pg: Schema) -> None:
    with psycopg.connect(with_database(pg.database.server, "postgres"), autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{pg.database.name}" ALLOW_CONNECTIONS true')


# -- refused by the server -----------------------------------------------------------------------------------


@pytest.mark.usefixtures("fixed_ids")
def test_a_remember_whose_id_exists_is_the_servers_refusal_and_writes_nothing(pg: Schema) -> None:
    """mnemo_put refusing its rows (here the record's id exists) on a connection still up is that
    StorageError, not a lost connection to ask about: nothing is written, and the writer goes on."""
    with MnemoClient(pg.url, OWNER) as c:
        c.remember("first")
        head = c.head
        with pytest.raises(StorageError) as info:
            c.remember("the same id")
        assert str(info.value) == (f"PostgreSQL at {c._store.path} failed: duplicate key value violates unique "
                                   'constraint "mnemo_records_pkey"')
        assert c.head == head and pg.sql("SELECT seq FROM mnemo_head") == [(head[0],)]
        assert c.get(FIXED_ID).content == "first"
        assert c.update(FIXED_ID, content="second").seq == head[0] + 1  # the same writer, still usable
        assert c.verify().ok


@pytest.mark.usefixtures("fixed_ids")
def test_a_transactions_put_of_an_id_that_exists_is_the_servers_refusal(pg: Schema) -> None:
    """In a transaction, a new record's put is committed by mnemo_commit without looking its id up
    first: an id that exists is the insert's refusal (a StorageError), the whole transaction is
    written nowhere, and the head row is free for another writer at once."""
    with MnemoClient(pg.url, OWNER) as c:
        c.remember("first")
        head = c.head
        with pytest.raises(StorageError) as info, c.transaction():
            c.remember("kept in the transaction")
        assert str(info.value) == (f"PostgreSQL at {c._store.path} failed: duplicate key value violates unique "
                                   'constraint "mnemo_records_pkey"')
        assert c.head == head and pg.sql("SELECT seq FROM mnemo_head") == [(head[0],)]
        with MnemoClient(pg.url, OWNER, lock_timeout=1) as other:  # would time out on a held head row
            assert other.update(FIXED_ID, content="second").seq == head[0] + 1
        assert c.get(FIXED_ID).content == "second" and c.verify().ok


def test_entries_the_server_builds_with_other_bytes_are_an_integrity_error(pg: Schema) -> None:
    """The client rebuilds each entry mnemo_put made and checks it against the hash the server returns:
    a server-side encoder that packs integers otherwise (here always in 9 bytes: valid msgpack, other
    bytes) is an IntegrityError naming the entry, not a remember reported done."""
    MnemoClient(pg.url, OWNER).close()
    pg.sql("CREATE OR REPLACE FUNCTION mnemo_uint(v bigint) RETURNS bytea LANGUAGE sql IMMUTABLE STRICT "
           "AS $$ SELECT '\\xcf'::bytea || int8send(v) $$")
    with MnemoClient(pg.url, OWNER) as c:
        with pytest.raises(IntegrityError) as info:
            c.remember("packed otherwise")
        assert str(info.value) == (f"{c._store.path}: the server built entry 1 with other bytes than Mnemo's "
                                   "encoding makes (mnemo_put disagrees with codec.make_entry)")


# -- cut off with the call in flight --------------------------------------------------------------------------


def test_a_cut_off_remember_that_landed_is_flushed_before_it_returns(
    pg: Schema, monkeypatch: pytest.MonkeyPatch, flushes: list[int]
) -> None:
    """Under durability "fsync", a remember whose call landed but whose answer was lost does not know
    that the call's own flush happened: it makes one before returning."""
    with MnemoClient(pg.url, OWNER, durability="fsync") as c:
        c.remember("before")
        assert flushes == []  # a lone remember is flushed by its own call
        cut = kill_at_append(monkeypatch, c._store, land=True)
        rec = c.remember("landed")
        assert cut["done"] and len(flushes) == 1
        assert _chain_ids(pg).count(rec.id) == 1 and c.get(rec.id).content == "landed"


def test_a_cut_off_remember_whose_fate_cannot_be_asked_raises_storage_error(
    pg: Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection dies with the call in flight and the server then refuses new connections, so
    whether the put landed cannot be asked: the remember raises the StorageError that says so; once the
    server takes connections again, the same client writes on, and the put that never ran is not there."""
    with MnemoClient(pg.url, OWNER) as c:
        c.remember("before")
        head = c.head
        kill_at_append(monkeypatch, c._store, land=False, meanwhile=lambda: _lock_out(pg))
        try:
            with pytest.raises(StorageError) as info:
                c.remember("never ran")
        finally:
            _allow_connections(pg)
        assert str(info.value).startswith(f"PostgreSQL at {c._store.path} is unreachable or the connection was lost: ")
        assert "not currently accepting connections" in str(info.value)
        assert c.remember("after").seq == head[0] + 1
        assert sorted(r.content for r in c.query()) == ["after", "before"]
        assert c.verify().ok


# -- flushes shared with other writes ------------------------------------------------------------------------


def test_a_remember_while_another_write_waits_is_flushed_after_its_call(
    pg: Schema, monkeypatch: pytest.MonkeyPatch, flushes: list[int]
) -> None:
    """Under "fsync", a remember made while another thread of the process is writing (here waiting
    for the writer lock) commits without waiting for the flush, and is then flushed, once, before it
    returns: the writes in progress share that flush instead of each waiting for its own in turn."""
    with MnemoClient(pg.url, OWNER, durability="fsync") as c:
        c.remember("alone")
        store: Any = c._store
        real_append = PostgresStore._append
        others: list[threading.Thread] = []

        def append(self: PostgresStore, batch: Any) -> int:
            if not others:  # another write starts, and waits for the writer lock this one holds
                def empty_transaction() -> None:
                    with c.transaction():
                        pass
                others.append(threading.Thread(target=empty_transaction))
                others[0].start()
                wait_for(lambda: store._writing == 2, "the other write to wait for the writer lock")
            return real_append(self, batch)

        monkeypatch.setattr(PostgresStore, "_append", append)
        before = len(flushes)
        rec = c.remember("with another write waiting")
        assert len(flushes) == before + 1  # made before remember returned
        others[0].join(10)
        assert c.get(rec.id).content == "with another write waiting"
