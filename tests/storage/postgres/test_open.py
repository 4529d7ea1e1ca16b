"""Opening a PostgreSQL store and the paths around it: what the constructor refuses or assumes (on both
backends, where they share it), a closed store making no connection again, what
opening reports (open_seconds), damage met while opening (a broken mnemo_meta table, its row deleted
during a migration), a read the server refuses, the flushes a store makes (none for a writer that wrote
nothing; one shared while another write is in progress), and the prefix range next to the last code
point."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from helpers.pg import Schema
from helpers.pg_faults import spy_flushes
from helpers.waiting import wait_for

from mnemo import MnemoClient, StorageError
from mnemo.chain.codec import ZERO_HASH, make_entry
from mnemo.errors import Closed, IntegrityError, InvalidInput, NotFound
from mnemo.storage import is_dsn, open_storage
from mnemo.storage.file import FileStore
from mnemo.storage.postgres import schema as pg_schema
from mnemo.storage.postgres import sql as pg_sql
from mnemo.storage.postgres.store import PostgresStore

OWNER = "owner"


# -- the prefix range ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("prefix", "successor"), [
    ("a\U0010fffe", "a\U0010ffff"),  # the last code point is a successor like any other
    ("\U0010fffe", "\U0010ffff"),
    ("a\U0010fffe\U0010ffff", "a\U0010ffff"),  # carried over to a U+10FFFE, which still has one
])
def test_a_prefix_ending_below_the_last_code_point_ends_at_the_last_code_point(prefix: str, successor: str) -> None:
    """The range's upper bound is the least string above the prefix: a bound further up (carrying
    over one character too early) would still answer rightly, beside the LIKE, but make an index scan
    read every string of the character before it."""
    assert pg_sql._successor(prefix) == successor


# -- what the constructor refuses or assumes ------------------------------------------------------------------


def test_an_unknown_durability_is_refused_before_anything_is_made(db: str) -> None:
    with pytest.raises(InvalidInput) as info:  # a ValueError too
        open_storage(db, OWNER, durability="sometimes")
    assert str(info.value) == "durability must be 'fsync', 'batch' or 'none', got 'sometimes'"
    with pytest.raises(NotFound, match="no Mnemo database"):  # no database was made
        open_storage(db, OWNER, readonly=True)


def test_a_store_made_without_options_is_a_writer_that_creates_its_database(db: str) -> None:
    store: FileStore | PostgresStore = PostgresStore(db, OWNER) if is_dsn(db) else FileStore(db, OWNER)
    try:
        assert store.readonly is False and store.durability == "fsync"
        assert store.head()[0] == 0  # the genesis it wrote
    finally:
        store.close()
    with MnemoClient(db, OWNER) as c:
        c.remember("after")
        assert c.verify().ok


def test_open_seconds_is_how_long_the_open_took(db: str) -> None:
    start = time.perf_counter()
    c = MnemoClient(db, OWNER, durability="none")
    took = time.perf_counter() - start
    try:
        assert 0 <= c.stats()["open_seconds"] <= took
    finally:
        c.close()


# -- damage met while opening ---------------------------------------------------------------------------------


def test_a_meta_table_without_its_db_id_column_is_a_clear_error(pg: Schema) -> None:
    """A psycopg error while opening (here the query of the database's id) is a StorageError naming the
    database and the server's reason, for a writer and a reader alike."""
    with MnemoClient(pg.url, OWNER) as c:
        c.remember("before")
        path = c._store.path
    pg.sql("ALTER TABLE mnemo_meta RENAME COLUMN db_id TO db_id_gone")
    for readonly in (False, True):
        with pytest.raises(StorageError) as info:
            MnemoClient(pg.url, OWNER, readonly=readonly)
        assert str(info.value) == f'PostgreSQL at {path} failed: column "db_id" does not exist'
    pg.sql("ALTER TABLE mnemo_meta RENAME COLUMN db_id_gone TO db_id")
    with MnemoClient(pg.url, OWNER) as c:  # nothing else was touched
        assert [r.content for r in c.query()] == ["before"]


def test_a_meta_row_deleted_while_a_writer_migrates_is_refused_as_damage(pg: Schema) -> None:
    """The meta row goes (another session deletes it, its transaction open) between the writer's read
    of the schema version and its read of the database's id: the writer's migration waits for that
    session, which then commits, and the open is refused with IntegrityError, as a missing row is."""
    genesis = make_entry(0, time.time_ns(), ZERO_HASH, "genesis", OWNER, {"db_id": b"\x07" * 16, "format": 1})
    with pg.connect(autocommit=False) as conn:  # a database of schema version 1 (see test_backend.py)
        conn.execute(pg_schema.MIGRATIONS[0])
        conn.execute("INSERT INTO mnemo_meta (schema_version, db_id) VALUES (1, %s)", [b"\x07" * 16])
        conn.execute("INSERT INTO mnemo_entries VALUES (0, 'genesis', %s, %s)", [genesis.raw, genesis.hash])
        conn.execute("INSERT INTO mnemo_head VALUES (true, 0, %s, %s, 0)", [genesis.hash, genesis.ts_ns])
        conn.commit()
    outcome: list[BaseException | None] = []
    with pg.connect(autocommit=False) as deleter:
        deleter.execute("DELETE FROM mnemo_meta")  # uncommitted: the opener still reads the row
        deleter_pid = deleter.info.backend_pid

        def open_it() -> None:
            try:
                MnemoClient(pg.url, OWNER).close()
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 - checked below
                outcome.append(exc)

        opener = threading.Thread(target=open_it)
        opener.start()
        with pg.connect() as watch:  # wait until the opener's migration waits for the deleter
            wait_for(lambda: not opener.is_alive() or watch.execute(
                "SELECT 1 FROM pg_locks WHERE NOT granted AND pid <> %s AND pid IN "
                "(SELECT pid FROM pg_stat_activity WHERE datname = current_database())", [deleter_pid]
            ).fetchall(), "the opener's migration to wait for the deleter")
            assert opener.is_alive(), outcome
        deleter.commit()
        opener.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], IntegrityError), outcome
    assert str(outcome[0]).endswith(": mnemo_meta holds no row")


# -- a read the server refuses ----------------------------------------------------------------------------------


def test_a_read_the_server_refuses_is_a_storage_error_and_the_connection_goes_on(pg: Schema) -> None:
    """An error of the query itself (not of the connection) on the read connection: StorageError with the
    server's reason, not retried; once the table is back, the next read works on the same connection."""
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("kept", tags=["t"])
        store: Any = c._store
        conn = store._reads()
        pg.sql("ALTER TABLE mnemo_records RENAME TO mnemo_records_gone")  # a table both reads read
        try:
            for read in (lambda: c.query(tags=["t"]), lambda: c.get(rec.id)):
                with pytest.raises(StorageError) as info:
                    read()
                assert str(info.value) == (f'PostgreSQL at {store.path} failed: relation "mnemo_records" does not '
                                           "exist")
        finally:
            pg.sql("ALTER TABLE mnemo_records_gone RENAME TO mnemo_records")
        assert [r.id for r in c.query(tags=["t"])] == [rec.id]
        assert store._reads() is conn and not conn.closed


def test_a_closed_store_makes_no_connection_again(pg: Schema) -> None:
    """After close() every read and write is Closed, and none of them opens a connection of its own:
    close() has run, so nothing would ever close it."""
    store = PostgresStore(pg.url, OWNER, durability="none")
    read = store._read
    store.close()
    for call in (store.info, store.refresh, lambda: list(store.log()), lambda: store.writing().__enter__()):
        with pytest.raises(Closed, match="^the client is closed$"):
            call()
    assert store._read is read and read.closed
    assert store._write is None and store._sync is None


# -- flushes ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("durability", ["fsync", "batch"])
def test_a_writer_that_committed_nothing_makes_no_flush(
    pg: Schema, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    MnemoClient(pg.url, OWNER).close()
    flushes = spy_flushes(monkeypatch)
    with MnemoClient(pg.url, OWNER, durability=durability) as c:
        assert c.query() == []
    assert flushes == []


def test_a_remember_beside_another_write_in_progress_leaves_its_flush_to_be_shared(
    pg: Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under "fsync", a remember made while another thread of the process is already writing commits
    without waiting for its own flush and is flushed after (a flush the other write can share); once it
    is alone, a remember is made durable by its own call (tests/storage/postgres/test_commit.py)."""
    flushes = spy_flushes(monkeypatch)
    with MnemoClient(pg.url, OWNER, durability="fsync") as c:
        store: Any = c._store
        c.remember("first")
        other: list[Any] = []
        idle = store._writing
        store._mutex.acquire()  # the other thread's write starts and waits for the writer lock
        try:
            thread = threading.Thread(target=lambda: other.append(c.remember("other thread's")))
            thread.start()
            wait_for(lambda: store._writing != idle, "the other thread's write to start")
            mine = c.remember("beside it")
            assert len(flushes) == 1  # this remember's, after its commit
        finally:
            store._mutex.release()
        thread.join(10)
        assert len(other) == 1 and len(flushes) == 1  # the other, alone by then, needed none
        assert sorted(r.content for r in c.query()) == ["beside it", "first", "other thread's"]
        assert c.get(mine.id).content == "beside it"
