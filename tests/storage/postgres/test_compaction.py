"""compact() on PostgreSQL and the snapshots that can still see what a forget deleted.

VACUUM FULL keeps every row an open snapshot may still see, so a compaction run beside an older snapshot
would leave the erased bytes in the rewritten files: it waits for such snapshots (lock_timeout at most),
and names them when they outlast it. What is PostgreSQL's own (xid horizons, the server's files).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from helpers.pg import Schema
from helpers.pg_server import data_directory, files_holding

from mnemo import MnemoClient
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
    base = data_directory(pg)
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
