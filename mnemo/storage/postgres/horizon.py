"""What compaction must wait for on PostgreSQL: the snapshots that can still see a forget's deleted rows.

VACUUM FULL copies every row that some transaction may still see ("recently dead"), so a rewrite run
beside an older snapshot keeps the erased bytes in the new files too. Before it runs, compact() waits
until nothing on the server is older than a horizon taken as it starts, after every forget it is to make
good: no backend whose snapshot (backend_xmin) or transaction (backend_xid) predates it, in any database
(a REPEATABLE READ snapshot in another database of the cluster holds the rows back as well: see
tests/storage/postgres/test_compaction.py), no prepared transaction, no replication slot holding an older xmin. Which
forget deleted a row is not known here, so a snapshot begun after the forget while an older transaction
ran counts as older too: the wait is never too short, sometimes longer than needed. Plain VACUUM
processes are left out, as PostgreSQL leaves them out of the horizon itself; an ANALYZE holds a snapshot
and is waited for.

The rewrite also takes each table whole (ACCESS EXCLUSIVE), so any transaction still holding one of
them makes it wait, lock_timeout at most; `held` then names those transactions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from mnemo.errors import LockTimeout

# The first xid no snapshot taken now counts as running: every transaction committed before this call
# (the forget's among them) is older than it.
HORIZON = "SELECT pg_snapshot_xmax(pg_current_snapshot())::text"

# xids in pg_stat_activity are 32-bit: compared through age(), which stays right across wraparound. An
# xid is older than the horizon when its age is greater.
HOLDERS = """
SELECT 'backend ' || pid, coalesce(datname, ''), coalesce(application_name, ''),
       coalesce(state, backend_type), coalesce(xact_start, backend_start)
FROM pg_stat_activity
WHERE pid <> ALL(%(own)s::int[])
  AND (age(backend_xmin) > age(%(h)s::xid) OR age(backend_xid) > age(%(h)s::xid))
  AND NOT (backend_type = 'autovacuum worker' AND query LIKE 'autovacuum: VACUUM%%'
           AND query NOT LIKE '%%ANALYZE%%')
UNION ALL
SELECT 'prepared transaction ' || quote_literal(gid), database::text, owner::text, 'prepared', prepared
FROM pg_prepared_xacts
WHERE age(transaction) > age(%(h)s::xid)
UNION ALL
SELECT 'replication slot ' || quote_literal(slot_name), coalesce(database::text, ''), '',
       CASE WHEN active THEN 'active' ELSE 'inactive' END, NULL
FROM pg_replication_slots
WHERE age(xmin) > age(%(h)s::xid)
ORDER BY 5 NULLS LAST
"""

# The other transactions holding a lock on a table, the oldest first.
LOCKERS = """
SELECT DISTINCT 'backend ' || a.pid, coalesce(a.datname, ''), coalesce(a.application_name, ''),
       coalesce(a.state, a.backend_type), coalesce(a.xact_start, a.backend_start)
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.relation = to_regclass(%(table)s) AND l.granted AND a.pid <> pg_backend_pid()
ORDER BY 5
"""

POLL = 0.05  # seconds between looks: a snapshot usually ends within milliseconds of its transaction


def horizon(fetch: Callable[[str], list[Any]]) -> str:
    """The horizon as a 32-bit xid (text), taken now."""
    return str(int(fetch(HORIZON)[0][0]) % 2**32)


def wait_for_older(
    fetch: Callable[[str, dict[str, Any]], list[Any]], xid: str, own_pids: Sequence[int],
    timeout: float, path: str,
) -> None:
    """Return once nothing named above is older than `xid`; raise LockTimeout naming what still is
    after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    params = {"h": xid, "own": list(own_pids)}
    while True:
        holders = fetch(HOLDERS, params)
        if not holders:
            return
        if time.monotonic() >= deadline:
            raise LockTimeout(_message(path, holders, timeout))
        time.sleep(POLL)


def held(
    fetch: Callable[[str, dict[str, Any]], list[Any]], table: str, timeout: float, path: str,
    rewrite: str = "VACUUM FULL",
) -> LockTimeout:
    """The error for a rewrite of `table` (by the command `rewrite`) that waited `timeout` seconds for its
    lock: who holds it."""
    return LockTimeout(
        f"compacting {path}: {rewrite} of {table} takes the table whole, and after {timeout:g} s these "
        f"still held it: {_named(fetch(LOCKERS, {'table': table}))}. End them and run compact again"
    )


def _message(path: str, holders: list[Any], timeout: float) -> str:
    return (
        f"compacting {path} waits for transactions that can still see the erased rows, and after {timeout:g} s "
        f"these still could: {_named(holders)}. End them (or pg_terminate_backend the pid) and run compact "
        "again; until then the erased bytes may remain in the table files"
    )


def _named(holders: list[Any]) -> str:
    if not holders:
        return "none any longer"
    named = "; ".join(
        f"{what} (database {db!r}, application_name {app!r}, {state}"
        + (f", since {since.isoformat()}" if since else "") + ")"
        for what, db, app, state, since in holders[:5]
    )
    return named + (f" and {len(holders) - 5} more" if len(holders) > 5 else "")
