"""Durability on PostgreSQL: how a commit is made durable (durability "fsync": a flush after it, shared,
waiting only a moment for other writes; "batch": a flusher thread, and close()), what happens when the
flush connection is lost and lost again (DurabilityError, and the store refuses further writes and
touches the server no more), what a commit whose connection died asks, and application_dsn's output."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.pg import Schema
from helpers.pg_faults import cannot_ask, terminate
from helpers.waiting import wait_for

from mnemo import MnemoClient, StorageError
from mnemo.errors import DurabilityError, NotFound
from mnemo.storage.postgres import store as pg_store

OWNER = "owner"


def _connections(monkeypatch: pytest.MonkeyPatch, store: Any, kill: bool = False) -> list[Any]:
    """The connections the store opens from here on (and, with `kill`, each is ended by the server as
    soon as it is open: a server that keeps dropping new sessions)."""
    opened: list[Any] = []
    real = store._connect

    def connect(*args: Any, **kw: Any) -> Any:
        conn = real(*args, **kw)
        opened.append(conn)
        if kill:
            terminate(store, conn.info.backend_pid)
        return conn

    monkeypatch.setattr(store, "_connect", connect)
    return opened


# -- durability "fsync" --------------------------------------------------------------------------------------


def test_a_lone_remember_opens_no_flush_connection(pg: Schema, monkeypatch: pytest.MonkeyPatch) -> None:
    """A remember alone is made durable by its own call (synchronous_commit on): no flush follows it,
    so no connection is opened for one (the writer's is all a client writing only remembers needs)."""
    with MnemoClient(pg.url, OWNER, durability="fsync") as c:
        store: Any = c._store
        opened = _connections(monkeypatch, store)
        for i in range(3):
            c.remember(f"r{i}")
        assert opened == [store._write]


def test_a_write_that_commits_nothing_makes_no_flush(pg: Schema, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty transaction, or an update refused before it staged anything, commits nothing: under
    "fsync" it does not wait for a flush, so it opens no connection but the writer's."""
    with MnemoClient(pg.url, OWNER, durability="fsync") as c:
        store: Any = c._store
        opened = _connections(monkeypatch, store)
        with c.transaction():
            pass
        with pytest.raises(NotFound):
            c.update("0" * 32, content="no such record")
        assert opened == [store._write]
        assert c.head[0] == 0


def test_a_write_that_commits_nothing_does_not_wait_for_another_threads_flush(
    pg: Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While one thread's flush is slow (a server that takes long to make it durable), another
    thread's update refused before it staged anything returns at once: it has nothing to wait for."""
    with MnemoClient(pg.url, OWNER, durability="fsync") as c:
        rec = c.remember("before")
        c.update(rec.id, content="warms the flush connection")
        store: Any = c._store
        sync = store._sync
        flushing, release = threading.Event(), threading.Event()
        real = sync.execute

        def execute(query: Any, params: Any = None, **kw: Any) -> Any:
            if "pg_current_xact_id" in str(query):  # the flush: held until the test lets it go
                flushing.set()
                release.wait(10)
            return real(query, params, **kw)

        monkeypatch.setattr(sync, "execute", execute)
        outcome: list[str] = []

        def refuse() -> None:
            try:
                c.update("0" * 32, content="no such record")
            except NotFound:
                outcome.append("NotFound")

        writer = threading.Thread(target=c.update, args=(rec.id,), kwargs={"content": "flushed slowly"})
        refused = threading.Thread(target=refuse)
        writer.start()
        try:
            assert flushing.wait(10)
            refused.start()
            refused.join(2)  # at once, unless it waits for the held flush (10 s)
            assert not refused.is_alive() and outcome == ["NotFound"] and not release.is_set()
        finally:
            release.set()
            writer.join()
            if refused.ident is not None:
                refused.join()
        assert c.get(rec.id).content == "flushed slowly"


def test_a_flush_does_not_wait_for_a_transaction_held_open(pg: Schema) -> None:
    """An update's flush waits a moment (FLUSH_WAIT) for this process's other writes in progress, to
    cover them too, not for as long as they last: with another thread holding a transaction open, the
    update still returns at once."""
    with MnemoClient(pg.url, OWNER, durability="fsync") as c:
        rec = c.remember("before")
        store: Any = c._store
        holding, release = threading.Event(), threading.Event()

        def hold() -> None:
            with c.transaction():
                holding.set()
                release.wait(10)

        other = threading.Thread(target=hold)
        try:
            with c.transaction():
                c.update(rec.id, content="flushed while another thread writes")
                other.start()
                wait_for(lambda: store._writing == 2, "the other thread to wait for the writer lock")
                start = time.monotonic()
            took = time.monotonic() - start  # the commit and its flush, the other thread's write in progress
            assert holding.wait(10) and not release.is_set()
            assert took < 0.5, f"the flush waited {took:.2f} s for a transaction held open"
        finally:
            release.set()
            if other.ident is not None:
                other.join()
        assert c.get(rec.id).content == "flushed while another thread writes"


def test_a_flush_connection_lost_twice_is_a_durability_error(pg: Schema, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flush connection found lost is replaced once; should the new one be lost too, the update
    raises DurabilityError (its commit is in the chain, but not known to be durable), the store refuses
    every later write, and close() neither flushes nor saves again: it opens no connection."""
    with MnemoClient(pg.url, OWNER, durability="fsync") as c:
        rec = c.remember("before")
        c.update(rec.id, content="warms the flush connection")
        store: Any = c._store
        assert store._sync is not None
        terminate(store, store._sync.info.backend_pid)
        opened = _connections(monkeypatch, store, kill=True)
        with pytest.raises(DurabilityError) as info:
            c.update(rec.id, content="not known to be durable")
        assert str(info.value).startswith(f"could not make a commit durable on {store.path}: ")
        assert len(opened) == 1  # the one replacement, lost too
        with pytest.raises(DurabilityError, match="an earlier write failed"):
            c.remember("refused")
        with pytest.raises(DurabilityError, match="an earlier write failed"):
            c.update(rec.id, content="refused")
        assert c.get(rec.id).content == "not known to be durable"  # reads go on
        opened.clear()
        c.close()
        assert opened == []


def test_a_commit_whose_fate_cannot_be_asked_is_a_clear_error(pg: Schema, monkeypatch: pytest.MonkeyPatch) -> None:
    """An update's connection dies as it commits, and the fresh connection that would ask whether the
    commit landed fails too: the update raises StorageError naming the lost connection (it neither
    claims the write nor says it is safe to retry), and the chain is unchanged."""
    with MnemoClient(pg.url, OWNER) as c:
        rec = c.remember("before")
        head = c.head
        store: Any = c._store
        conn = store._writer()

        def commit() -> None:  # the commit is not sent: the connection is lost first
            terminate(store, conn.info.backend_pid)
            conn.execute("SELECT 1")  # raises: the server closed the connection
            raise AssertionError("the connection survived")

        monkeypatch.setattr(conn, "commit", commit)
        cannot_ask(monkeypatch, store)
        with pytest.raises(StorageError) as info:
            c.update(rec.id, content="in flight")
        assert str(info.value) == (f"PostgreSQL at {store.path} is unreachable or the connection was lost: "
                                   "server closed the connection unexpectedly")
        monkeypatch.undo()
        assert c.head == head
    with MnemoClient(pg.url, OWNER) as again:
        assert again.get(rec.id).content == "before" and again.verify().ok


# -- durability "batch", and close() --------------------------------------------------------------------------


@pytest.fixture
def no_flusher(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The batch flusher of the stores opened here waits for ever (until close()): what is pending at
    close() is still pending."""
    monkeypatch.setattr(pg_store, "BATCH_INTERVAL", 3600.0)
    yield


def test_close_flushes_a_batch_stores_pending_commits(pg: Schema, no_flusher: None) -> None:
    """Under durability "batch", the commits the flusher has not yet made durable are by close():
    it flushes them, on a connection of its own."""
    c = MnemoClient(pg.url, OWNER, durability="batch")
    store: Any = c._store
    rec = c.remember("one")
    c.update(rec.id, content="two")
    c.remember("three")
    assert (store._commits, store._flushed, store._sync) == (3, 0, None)
    c.close()
    assert store._flushed == 3 and store._sync is not None and store._sync.closed


def test_close_under_durability_none_makes_no_flush(pg: Schema, monkeypatch: pytest.MonkeyPatch) -> None:
    """Durability "none" never flushes, close() included: it opens no connection to flush."""
    c = MnemoClient(pg.url, OWNER, durability="none")
    store: Any = c._store
    rec = c.remember("one")
    c.update(rec.id, content="two")
    opened = _connections(monkeypatch, store)
    c.close()
    assert opened == [] and store._flushed == 0


def test_a_batch_flusher_that_failed_stops(pg: Schema, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch flusher losing its connection, and the new one, fails the store (later writes are
    refused) and then stops: it opens no more connections to the server, round after round."""
    with MnemoClient(pg.url, OWNER, durability="batch") as c:
        store: Any = c._store
        rec = c.remember("one")
        wait_for(lambda: store._flushed == 1, "the flusher's first flush")
        terminate(store, store._sync.info.backend_pid)
        opened = _connections(monkeypatch, store, kill=True)
        c.update(rec.id, content="two")
        wait_for(lambda: store._failed is not None, "the flusher to fail")
        with pytest.raises(DurabilityError, match="an earlier write failed"):
            c.remember("refused")
        made = len(opened)
        assert made == 1  # the one replacement, lost too

        class Rounds(threading.Event):
            """The flusher's stop event, counting the rounds it waits."""

            rounds = 0

            def wait(self, timeout: float | None = None) -> bool:
                Rounds.rounds += 1
                return super().wait(timeout)

        store._stop = Rounds()
        wait_for(lambda: Rounds.rounds >= 3, "the flusher to go round twice more")
        assert len(opened) == made


# -- application_dsn -----------------------------------------------------------------------------------------


def test_application_dsn_sets_the_role_and_its_password_or_none() -> None:
    """The DSN for another role: the owner's password is dropped, and the role's own is set if given."""
    dsn = "host=db.example port=5433 user=owner password=secret dbname=mnemo"
    assert pg_store.application_dsn(dsn, "app") == "user=app dbname=mnemo host=db.example port=5433"
    assert pg_store.application_dsn(dsn, "app", "pw") == "user=app password=pw dbname=mnemo host=db.example port=5433"
    assert pg_store.application_dsn("postgresql://owner:s3@db.example/mnemo", "app", "new pw") == (
        "user=app password='new pw' dbname=mnemo host=db.example"
    )
