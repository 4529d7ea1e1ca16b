"""compact() on PostgreSQL and the snapshots that can still see what a forget deleted.

VACUUM FULL keeps every row an open snapshot may still see, so a compaction run beside an older snapshot
would leave the erased bytes in the rewritten files: it waits for such snapshots (lock_timeout at most),
and names them when they outlast it. What is PostgreSQL's own (xid horizons, the server's files).

The guards of compact() on PostgreSQL and the writer session's setup: the holders a compaction names
(never the store's own connections), which tables it rewrites (payloads, tags and terms, not the ones it only
measures), an error or an operator's cancel part way, and how long the writer's session waits for the
head row (lock_timeout in ms, at least 1 ms: 0 is never "wait for ever"), its setup refused, and a
refused head row that is not retried on another connection. (A compaction refused while another thread
holds the writer lock is tested on both backends, in tests/contract/test_client.py.)"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from helpers.pg import Schema
from helpers.pg_server import database_directory, files_holding
from helpers.waiting import wait_for

from mnemo import MnemoClient, StorageError
from mnemo.errors import LockTimeout

OWNER = "owner"
HOLDER = "mnemo-test-old-snapshot"


@contextmanager
def old_snapshot(pg: Schema) -> Iterator[psycopg.Connection[Any]]:
    """A REPEATABLE READ transaction that has taken its snapshot (its first query), as a long report
    would; it holds no lock on mnemo's tables."""
    conn = pg.connect(autocommit=False, application_name=HOLDER)
    try:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        conn.execute("SELECT 1").fetchone()
        yield conn
    finally:
        conn.close()


def _secret_records(c: MnemoClient) -> tuple[bytes, list[str]]:
    secret = f"SECRET-{secrets.token_hex(8)}".encode()
    small = c.remember(secret.decode() + " small", tags=[f"tag-{secret.decode()}"])
    large = c.remember(secret.decode() + "-" + secrets.token_hex(3000), tags=["big"])  # TOASTed
    return secret, [small.id, large.id]


def test_compact_waits_for_a_snapshot_older_than_the_forget_then_erases(pg: Schema) -> None:
    base = database_directory(pg)
    if base is None:
        pytest.skip("the server's data directory is not readable by this user")
    with MnemoClient(pg.url, OWNER, lock_timeout=20) as c:
        secret, ids = _secret_records(c)
        kept = c.remember("kept")
        with old_snapshot(pg) as holder:
            c.forget(ids)
            released = threading.Timer(0.5, holder.rollback)
            released.start()
            t0 = time.monotonic()
            result = c.compact()
            waited = time.monotonic() - t0
            released.join()
        pg.sql("CHECKPOINT")
        assert waited >= 0.4, "compact ran beside the older snapshot"
        assert result["reclaimed"] > 0
        assert files_holding(base, secret) == []
        assert c.get(kept.id).content == "kept" and c.verify().ok


def test_compact_names_the_snapshot_that_outlasts_its_lock_timeout(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER, lock_timeout=0.3) as c:
        _secret, ids = _secret_records(c)
        with old_snapshot(pg) as holder:
            pid, db = holder.info.backend_pid, holder.info.dbname
            c.forget(ids)
            size = pg.sql("SELECT pg_total_relation_size('mnemo_payloads')")
            with pytest.raises(LockTimeout) as caught:
                c.compact()
            message = str(caught.value)
            holder_named = f"backend {pid} (database {db!r}, application_name '{HOLDER}', idle in transaction, since "
            assert holder_named in message
            assert "after 0.3 s" in message and "run compact again" in message
            # nothing was rewritten, and the store goes on as it was
            assert pg.sql("SELECT pg_total_relation_size('mnemo_payloads')") == size
            assert c.verify().ok
        # the snapshot gone, the same call succeeds
        assert c.compact()["reclaimed"] > 0


def test_compact_waits_for_an_older_snapshot_in_another_database_too(pg: Schema) -> None:
    # PostgreSQL keeps the rows such a snapshot could see in every database's tables: the wait covers it
    other = psycopg.connect(pg.database.server, autocommit=False, application_name=HOLDER)
    try:
        other.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        other.execute("SELECT 1").fetchone()
        other_db = other.info.dbname
        with pg.connect() as mine:
            assert other_db != mine.info.dbname
        with MnemoClient(pg.url, OWNER, lock_timeout=0.3) as c:
            _secret, ids = _secret_records(c)
            c.forget(ids)
            with pytest.raises(LockTimeout) as caught:
                c.compact()
            assert f"backend {other.info.backend_pid} (database {other_db!r}, application_name '{HOLDER}', " in str(
                caught.value
            )
            other.rollback()
            assert c.compact()["reclaimed"] > 0
    finally:
        other.close()


def test_compact_names_a_transaction_holding_a_table_it_rewrites(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER, lock_timeout=0.3) as c:
        _secret, ids = _secret_records(c)
        c.forget(ids)
        with pg.connect(autocommit=False, application_name=HOLDER) as reader:
            reader.execute("SELECT count(*) FROM mnemo_tags").fetchone()  # holds its lock until the end
            with pytest.raises(LockTimeout) as caught:
                c.compact()
            pid, db = reader.info.backend_pid, reader.info.dbname
        assert (
            ": VACUUM FULL of mnemo_tags takes the table whole, and after 0.3 s these still held it: "
            f"backend {pid} (database {db!r}, application_name '{HOLDER}', idle in transaction, since "
        ) in str(caught.value)
        assert c.compact()["reclaimed"] > 0


# -- the guards of compact() and the writer session's setup ------------------------------------------------

GUARD_HOLDER = "mnemo-test-guard-holder"


RESCUE_AFTER = 3.0  # seconds: only a wrong wait (for ever) lasts this long; the right one fails in ms


@pytest.fixture
def horizon_of_this_database(monkeypatch: pytest.MonkeyPatch, pg_database: Any) -> None:
    """compact() waits for old snapshots in every database of the server: the other test runs sharing it
    would hold these tests up. Their holders are left out here; this run's database's are all kept."""
    if pg_database is None:
        return
    from mnemo.storage.postgres import horizon

    real = horizon.wait_for_older

    def wait(fetch: Any, xid: str, own: Any, timeout: float, path: str) -> None:
        def here(sql: str, params: Any = None) -> list[Any]:
            rows = fetch(sql, params)
            return [r for r in rows if r[1] == pg_database.name] if sql == horizon.HOLDERS else rows

        real(here, xid, own, timeout, path)

    monkeypatch.setattr(horizon, "wait_for_older", wait)


def _filenodes(pg: Schema, tables: list[str]) -> dict[str, int]:
    return {t: pg.sql("SELECT pg_relation_filenode(to_regclass(%s))", [t])[0][0] for t in tables}


@contextmanager
def _released_after(conn: psycopg.Connection[Any], seconds: float) -> Iterator[None]:
    """Roll `conn` back after `seconds` if the test is still in the block: a code path that would wait
    for ever on `conn`'s locks then ends (and the test fails on what it got) instead of hanging."""
    timer = threading.Timer(seconds, conn.rollback)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()


# -- compact() -----------------------------------------------------------------------------------------
@pytest.mark.usefixtures("horizon_of_this_database")
def test_compact_names_only_other_transactions_never_its_own_connections(pg: Schema) -> None:
    # A transaction with an xid older than the horizon holds back every snapshot taken after it: the
    # store's own connection, running the look-up, is then "older" too and must not be named.
    with MnemoClient(pg.url, OWNER, lock_timeout=0.3) as c:
        gone = c.remember("gone")
        with pg.connect(autocommit=False, application_name=GUARD_HOLDER) as holder:
            holder.execute("SELECT pg_current_xact_id()").fetchone()  # an xid, no lock on mnemo's tables
            pid, dbname = holder.info.backend_pid, holder.info.dbname
            c.forget(gone.id)  # after the holder's xid: the holder is older than the forget
            with pytest.raises(LockTimeout) as caught:
                c.compact()
            holder.rollback()
        message = str(caught.value)
        # (other databases' busy backends may be named too: the holder's xid holds their snapshots back)
        here = [int(p) for p, db in re.findall(r"backend (\d+) \(database '([^']*)'", message) if db == dbname]
        assert here == [pid], message
        assert c.compact()["reclaimed"] >= 0


@pytest.mark.usefixtures("horizon_of_this_database")
def test_compact_rewrites_payloads_records_tags_and_terms_and_leaves_the_tables_it_only_measures(
    pg: Schema,
) -> None:
    """The records too (schema version 12): a record's row holds its latest payload's copy, which an
    update or a forget leaves in a dead row."""
    with MnemoClient(pg.url, OWNER, lock_timeout=0.3) as c:
        c.forget(c.remember("gone " + "x" * 5000, tags=["t1", "t2"]).id)
        kept = c.remember("kept", tags=["t3"])
        rewritten = ["mnemo_payloads", "mnemo_records", "mnemo_tags", "mnemo_terms"]
        measured = ["mnemo_versions", "mnemo_docs"]
        before = _filenodes(pg, rewritten + measured)
        # a reader of the measured tables does not hold compact up: they are not taken whole
        with pg.connect(autocommit=False, application_name=GUARD_HOLDER) as reader:
            reader.execute("SELECT count(*) FROM mnemo_versions, mnemo_docs").fetchone()
            result = c.compact()
            reader.rollback()
        after = _filenodes(pg, rewritten + measured)
        assert result["bytes_before"] > 0
        assert all(after[t] != before[t] for t in rewritten), (before, after)
        assert all(after[t] == before[t] for t in measured), (before, after)
        assert c.get(kept.id).content == "kept" and c.verify().ok


@pytest.mark.usefixtures("horizon_of_this_database")
def test_a_compaction_cancelled_by_an_operator_is_a_storage_error_and_the_store_goes_on(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER, lock_timeout=20) as c:
        rec = c.remember("kept")
        c.forget(c.remember("gone").id)
        with pg.connect(autocommit=False, application_name=GUARD_HOLDER) as reader, pg.connect() as admin:
            reader.execute("SELECT count(*) FROM mnemo_tags").fetchone()  # VACUUM FULL waits for it

            def cancel() -> None:
                vacuum = wait_for(
                    lambda: admin.execute(
                        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                        "AND query LIKE 'VACUUM (FULL) mnemo_tags%' AND wait_event_type = 'Lock'"
                    ).fetchall(),
                    "the compaction to wait for mnemo_tags",
                )
                admin.execute("SELECT pg_cancel_backend(%s)", [vacuum[0][0]])

            t = threading.Thread(target=cancel)
            t.start()
            try:
                with pytest.raises(StorageError) as caught:
                    c.compact()
            finally:
                t.join()
            reader.rollback()
        assert type(caught.value) is StorageError
        assert "cancelled the statement: canceling statement due to user request" in str(caught.value)
        # the writer lock and the head row were given back: writes and a second compaction go on
        assert c.update(rec.id, content="after").content == "after"
        assert c.compact()["reclaimed"] >= 0 and c.verify().ok


@pytest.mark.usefixtures("horizon_of_this_database")
@pytest.mark.parametrize("seconds", [0.001, 0.0005, 0])
def test_compact_with_a_millisecond_lock_timeout_gives_up_on_a_held_table(pg: Schema, seconds: float) -> None:
    """Below a millisecond too, and at 0: PostgreSQL's lock_timeout = 0 would be "wait for ever"."""
    with MnemoClient(pg.url, OWNER, lock_timeout=seconds) as c:
        c.forget(c.remember("gone").id)
        with pg.connect(autocommit=False, application_name=GUARD_HOLDER) as reader:
            reader.execute("SELECT count(*) FROM mnemo_tags").fetchone()
            with _released_after(reader, RESCUE_AFTER), pytest.raises(LockTimeout) as caught:
                c.compact()
        assert f": VACUUM FULL of mnemo_tags takes the table whole, and after {seconds} s these still held it" in str(
            caught.value
        )


# -- the writer's session ------------------------------------------------------------------------------
@pytest.mark.usefixtures("horizon_of_this_database")
@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "1ms"), (0.0001, "1ms"), (0.001, "1ms"), (0.25, "250ms"), (1, "1s"), (2.5, "2500ms")],
)
def test_the_writer_waits_for_the_head_row_as_long_as_lock_timeout_and_never_for_ever(
    pg: Schema, seconds: float, shown: str
) -> None:
    # PostgreSQL's lock_timeout = 0 is "wait for ever": a client's 0 (do not wait) must become 1 ms
    with MnemoClient(pg.url, OWNER, lock_timeout=seconds) as c:
        c.remember("a write opens the writer's session")
        assert c._store._write.execute("SHOW lock_timeout").fetchone()[0] == shown  # type: ignore[attr-defined]


@pytest.mark.usefixtures("horizon_of_this_database")
def test_a_write_with_lock_timeout_zero_fails_at_once_on_a_held_head_row(pg: Schema) -> None:
    with MnemoClient(pg.url, OWNER, lock_timeout=0) as c:
        rec = c.remember("v1")
        with pg.connect(autocommit=False, application_name=GUARD_HOLDER) as holder:
            holder.execute("SELECT seq FROM mnemo_head FOR UPDATE").fetchone()
            with _released_after(holder, RESCUE_AFTER), pytest.raises(LockTimeout) as caught:
                c.update(rec.id, content="v2")
        assert "another writer holds it" in str(caught.value)
        assert c.get(rec.id).content == "v1"


@pytest.mark.usefixtures("horizon_of_this_database")
def test_a_lock_timeout_the_server_refuses_is_a_storage_error_and_reads_go_on(pg: Schema) -> None:
    # 3e6 s is 3e9 ms, above PostgreSQL's limit for lock_timeout (2^31 - 1 ms): the writer's session
    # cannot be set up, which is the StorageError the caller gets, not an error of the driver
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("kept")
    with MnemoClient(pg.url, OWNER, lock_timeout=3e6) as c:
        # a new record's put (which takes the head row only to commit), an update (which takes it
        # first), then the put again: nothing half set up was kept from the first try
        writes = [lambda: c.remember("refused"), lambda: c.update(rec.id, content="refused"), lambda: c.remember("x")]
        for write in writes:
            with pytest.raises(StorageError) as caught:
                write()
            assert type(caught.value) is StorageError
            assert str(caught.value).endswith('failed: invalid value for parameter "lock_timeout": "3000000000"')
        assert c.get(rec.id).content == "kept"
        assert [r.id for r in c.list_records()] == [rec.id]


@pytest.mark.usefixtures("horizon_of_this_database")
def test_a_writer_cancelled_while_waiting_for_the_head_row_is_not_retried_on_a_new_connection(pg: Schema) -> None:
    # Only a connection found lost is replaced: an operator's cancel of the wait (the connection still
    # up) is the caller's StorageError, not the start of a second wait on another connection, which
    # here would get the row, as the holder ends as soon as a second waiter shows.
    with MnemoClient(pg.url, OWNER, lock_timeout=20) as c:
        rec = c.remember("v1")
        with pg.connect(autocommit=False, application_name=GUARD_HOLDER) as holder, pg.connect() as watcher:
            holder.execute("SELECT seq FROM mnemo_head FOR UPDATE").fetchone()
            waiters: list[int] = []
            stop = threading.Event()

            def watch() -> None:
                while not stop.is_set():
                    for (pid,) in watcher.execute(
                        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                        "AND wait_event_type = 'Lock' AND pid <> %s", [holder.info.backend_pid]
                    ).fetchall():
                        if not waiters:
                            waiters.append(pid)
                            watcher.execute("SELECT pg_cancel_backend(%s)", [pid])
                        elif pid != waiters[0]:
                            waiters.append(pid)
                            holder.rollback()
                            return
                    time.sleep(0.01)

            t = threading.Thread(target=watch)
            t.start()
            try:
                with pytest.raises(StorageError) as caught:
                    c.update(rec.id, content="v2")
            finally:
                stop.set()
                t.join()
            assert "cancelled the statement: canceling statement due to user request" in str(caught.value)
            assert len(waiters) == 1
            holder.rollback()
        assert c.get(rec.id).content == "v1"
        assert c.update(rec.id, content="v2").content == "v2"
