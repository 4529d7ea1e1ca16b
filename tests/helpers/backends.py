"""What a behaviour test asks of a database, whichever backend holds it (the `db` fixture: a file path
or a postgresql:// URI): its entries, an entry's payload, and everything it holds, to show that a
refused operation changed nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mnemo.audit import read_chain
from mnemo.chain.codec import Entry

# The tables a write changes; mnemo_tree is a cache of the Merkle tree (as the file's .leaves is),
# saved when a client closes, and not part of what a write changes.
PG_TABLES = (
    "mnemo_meta", "mnemo_head", "mnemo_entries", "mnemo_payloads", "mnemo_records", "mnemo_versions",
    "mnemo_tags", "mnemo_forgotten", "mnemo_docs", "mnemo_terms", "mnemo_vectors", "mnemo_vectors_gone",
)


def is_pg(db: str | Path) -> bool:
    return str(db).startswith(("postgresql://", "postgres://"))


_last: list[Any] = []  # (url, connection) of the last database read: tests compare states often


def _connection(db: str | Path) -> Any:
    """A connection to the database `db` names, kept until another database is asked for (one at a
    time, so that a run's many schemas do not hold as many connections)."""
    import psycopg

    if _last:
        url, conn = _last[0]
        if url == str(db) and not conn.closed and not conn.broken:
            try:
                conn.execute("SELECT 1")  # a test may have terminated the server's connections
                return conn
            except psycopg.OperationalError:
                pass
        conn.close()
        _last.clear()
    conn = psycopg.connect(str(db), autocommit=True)
    _last.append((str(db), conn))
    return conn


def entries(db: str | Path) -> list[Entry]:
    """Every entry of the chain, in order."""
    return [item.entry for item in read_chain(str(db))]


def payload(db: str | Path, seq: int) -> bytes | None:
    """The payload stored for the entry with this seq (None when it has none or it was erased)."""
    for item in read_chain(str(db), payloads=True):
        if item.entry.seq == seq:
            return item.payload if item.state == "ok" else None
    raise AssertionError(f"no entry with seq {seq} in the chain")


def snapshot(db: str | Path) -> Any:
    """Everything the database holds: the log's bytes, or the rows of every table (sorted)."""
    if not is_pg(db):
        return Path(db).read_bytes()
    conn = _connection(db)
    return {
        table: sorted((tuple(row) for row in conn.execute(f"SELECT * FROM {table}").fetchall()), key=repr)
        for table in PG_TABLES
    }


def is_empty(db: str | Path) -> bool:
    """Whether nothing was created at `db`: no file, or no table in the URI's schema."""
    if not is_pg(db):
        return not Path(db).exists()
    sql = "SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
    row = _connection(db).execute(sql).fetchone()
    return row is not None and row[0] == 0


def state(db: str | Path) -> Any:
    """What a refused call must leave as it was: every file of the database's folder but the snapshot
    (which only close writes), or every table's rows."""
    if is_pg(db):
        return snapshot(db)
    folder = Path(db).parent
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and not p.name.endswith(".snap")}


def stored(db: str | Path) -> dict[str, bytes]:
    """Where the database keeps bytes, by name, for searching them: every file under the file
    database's folder (the log and every sidecar), or every table's values (text as UTF-8)."""
    if not is_pg(db):
        folder = Path(db).parent
        return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
    out: dict[str, bytes] = {}
    conn = _connection(db)
    for table in (*PG_TABLES, "mnemo_tree"):
        parts: list[bytes] = []
        for row in sorted(conn.execute(f"SELECT * FROM {table}").fetchall(), key=repr):
            for value in row:
                for v in value if isinstance(value, list) else [value]:
                    parts.append(bytes(v) if isinstance(v, (bytes, memoryview)) else str(v).encode())
        out[table] = b"\x00".join(parts)
    return out


def commits(db: str | Path) -> int:
    """How many commits wrote entries: the log's frames, or the transactions that inserted rows of
    mnemo_entries (rows inserted by one transaction share its xmin)."""
    if not is_pg(db):
        from helpers.frames import read_frames

        return len(read_frames(db))
    row = _connection(db).execute("SELECT count(DISTINCT xmin::text) FROM mnemo_entries").fetchone()
    assert row is not None
    return int(row[0])


# What serves a stored payload's bytes to a read, by backend: a test that a command reads no content
# makes it raise.
PAYLOAD_READERS = {"file": "read_packed", "postgres": "_checked"}


def payload_reader(db: str | Path) -> str:
    return PAYLOAD_READERS["postgres" if is_pg(db) else "file"]


def onto(db: str | Path, source: str | Path) -> str:
    """The file database `source` on the backend of `db`: the file itself, or (PostgreSQL) its copy,
    entry for entry, into the empty database `db`."""
    if not is_pg(db):
        return str(source)
    from mnemo import MnemoClient

    owner = entries(source)[0].agent  # the copy needs admin on *: the owner's
    with MnemoClient(source, owner, readonly=True) as c:
        report = c.copy_to(str(db))
    assert report.ok, report.problems
    return str(db)


def write_once(client: Any, write: str, rec_id: str) -> None:
    """One write of the kind named: a new record ("remember"), a new version of `rec_id` ("update"), a
    new record inside a transaction ("transaction"), or a compaction ("compact", a writer too)."""
    if write == "remember":
        client.remember("blocked")
    elif write == "update":
        client.update(rec_id, content="blocked")
    elif write == "compact":
        client.compact()
    else:
        with client.transaction():
            client.remember("blocked")


def damage_payload(db: str | Path, seq: int) -> None:
    """Flip a bit of the payload of the entry with this seq, as bit rot (a file) or a hand on the table
    (PostgreSQL, its triggers off for the session: in its row and in its record's copy) would."""
    if not is_pg(db):
        from helpers.frames import flip_byte, read_frames

        slot = next(s for f in read_frames(db) for e, s in zip(f.entries, f.slots, strict=True) if e.seq == seq)
        start, length = slot.payload_range()
        flip_byte(db, start + length // 2)
        return
    import psycopg

    with psycopg.connect(str(db), autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        for table in ("mnemo_payloads", "mnemo_records"):
            conn.execute(f"UPDATE {table} SET payload = set_byte(payload, 0, get_byte(payload, 0) # 1) "
                         "WHERE seq = %s", (seq,))
