"""The baselines Mnemo is measured against: SQLite in WAL mode, LMDB (py-lmdb) with a tag index, a raw
append-and-fsync file, and a plain SHA-256 loop.

SQLite schema (the same data Mnemo stores, and an index so a tag query need not scan):

    CREATE TABLE records (id TEXT PRIMARY KEY, content TEXT NOT NULL,
                          tags TEXT NOT NULL, metadata TEXT NOT NULL);   -- tags, metadata: JSON
    CREATE TABLE record_tags (record_id TEXT NOT NULL, tag TEXT NOT NULL);
    CREATE INDEX record_tags_by_tag ON record_tags (tag, record_id);

A write is one row in `records` plus one row per tag in `record_tags`; "one insert per transaction"
means BEGIN, those inserts, COMMIT. Ids are made by the same time-ordered generator Mnemo uses.

LMDB layout (`LmdbStore`): a `records` database, id -> the same JSON text SQLite stores (content, tags,
metadata in one object), and a `tags` database with sorted duplicates, tag -> id, the tag index. A
write is one put in `records` plus one put per tag in `tags`, in one write transaction.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from mnemo.ids import new_id

from .common import RecordSpec

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id TEXT PRIMARY KEY,
    content TEXT NOT NULL,
    tags TEXT NOT NULL,
    metadata TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS record_tags (record_id TEXT NOT NULL, tag TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS record_tags_by_tag ON record_tags (tag, record_id);
"""

QUERY_BY_TAG = """
SELECT r.id, r.content, r.tags, r.metadata
FROM record_tags t JOIN records r ON r.id = t.record_id
WHERE t.tag = ?
ORDER BY r.id
"""
GET_BY_ID = "SELECT id, content, tags, metadata FROM records WHERE id = ?"


class SqliteStore:
    """A memory table in SQLite, WAL journal, `synchronous` NORMAL or FULL."""

    def __init__(self, path: str, synchronous: str = "NORMAL") -> None:
        if synchronous not in ("NORMAL", "FULL", "OFF"):
            raise ValueError(f"synchronous must be NORMAL, FULL or OFF, got {synchronous!r}")
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={synchronous}")
        self.conn.executescript(SCHEMA)

    def _insert(self, rec: RecordSpec) -> str:
        rec_id = new_id()
        self.conn.execute(
            "INSERT INTO records (id, content, tags, metadata) VALUES (?, ?, ?, ?)",
            (rec_id, rec.content, json.dumps(sorted(rec.tags)), json.dumps(rec.metadata, sort_keys=True)),
        )
        self.conn.executemany(
            "INSERT INTO record_tags (record_id, tag) VALUES (?, ?)", [(rec_id, t) for t in rec.tags]
        )
        return rec_id

    def insert(self, rec: RecordSpec) -> str:
        """One record in its own transaction."""
        self.conn.execute("BEGIN")
        try:
            rec_id = self._insert(rec)
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        return rec_id

    def insert_many(self, recs: Iterable[RecordSpec]) -> int:
        """Every record in one transaction."""
        n = 0
        self.conn.execute("BEGIN")
        try:
            for rec in recs:
                self._insert(rec)
                n += 1
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        return n

    def query_tag(self, tag: str) -> list[tuple[str, str, list[str], dict[str, Any]]]:
        """Full rows carrying `tag`, decoded, in id order (what Mnemo's query(tags=[tag]) returns)."""
        return [
            (rec_id, content, json.loads(tags), json.loads(meta))
            for rec_id, content, tags, meta in self.conn.execute(QUERY_BY_TAG, (tag,))
        ]

    def get(self, rec_id: str) -> tuple[str, str, list[str], dict[str, Any]]:
        """One row by its primary key, decoded (what Mnemo's get(id) returns)."""
        row = self.conn.execute(GET_BY_ID, (rec_id,)).fetchone()
        if row is None:
            raise KeyError(rec_id)
        got_id, content, tags, meta = row
        return got_id, content, json.loads(tags), json.loads(meta)

    def ids(self, k: int) -> list[str]:
        """k ids spread over the table, in a shuffled order (seeded)."""
        every = [i for (i,) in self.conn.execute("SELECT id FROM records ORDER BY id")]
        picked = every[:: max(1, len(every) // k)][:k]
        random.Random(7).shuffle(picked)
        return picked

    def count(self) -> int:
        (n,) = self.conn.execute("SELECT count(*) FROM records").fetchone()
        return int(n)

    def close(self) -> None:
        self.conn.close()


class LmdbStore:
    """A memory table in LMDB (py-lmdb): records by id, and a tag -> id index with sorted duplicates.
    `sync=True` flushes at every commit (durable, like durability="fsync"); False leaves it to the OS."""

    MAP_SIZE = 8 << 30  # address space only: the file grows as it is written

    def __init__(self, path: str, sync: bool = False) -> None:
        import lmdb  # the `bench` extra

        self.path = path
        self.env = lmdb.open(path, map_size=self.MAP_SIZE, max_dbs=2, sync=sync, metasync=sync)
        self.records = self.env.open_db(b"records")
        self.tags = self.env.open_db(b"tags", dupsort=True)

    def _insert(self, txn: Any, rec: RecordSpec) -> str:
        rec_id = new_id()
        key = rec_id.encode()
        value = json.dumps(
            {"content": rec.content, "tags": sorted(rec.tags), "metadata": rec.metadata}, sort_keys=True
        ).encode()
        txn.put(key, value, db=self.records)
        for tag in rec.tags:
            txn.put(tag.encode(), key, db=self.tags)
        return rec_id

    def insert(self, rec: RecordSpec) -> str:
        """One record in its own write transaction."""
        with self.env.begin(write=True) as txn:
            return self._insert(txn, rec)

    def insert_many(self, recs: Iterable[RecordSpec]) -> int:
        """Every record in one write transaction."""
        n = 0
        with self.env.begin(write=True) as txn:
            for rec in recs:
                self._insert(txn, rec)
                n += 1
        return n

    def query_tag(self, tag: str) -> list[tuple[str, str, list[str], dict[str, Any]]]:
        """Full records carrying `tag`, decoded, in id order (the index keeps an id's duplicates sorted)."""
        out = []
        with self.env.begin() as txn:
            cur = txn.cursor(db=self.tags)
            get = txn.get
            records = self.records
            if cur.set_key(tag.encode()):
                for key in cur.iternext_dup():
                    obj = json.loads(get(key, db=records))
                    out.append((key.decode(), obj["content"], obj["tags"], obj["metadata"]))
        return out

    def get(self, rec_id: str) -> tuple[str, str, list[str], dict[str, Any]]:
        """One record by its id, decoded."""
        with self.env.begin() as txn:
            raw = txn.get(rec_id.encode(), db=self.records)
        if raw is None:
            raise KeyError(rec_id)
        obj = json.loads(raw)
        return rec_id, obj["content"], obj["tags"], obj["metadata"]

    def ids(self, k: int) -> list[str]:
        """k ids spread over the records, in a shuffled order (seeded)."""
        with self.env.begin() as txn:
            every = [key.decode() for key in txn.cursor(db=self.records).iternext(values=False)]
        picked = every[:: max(1, len(every) // k)][:k]
        random.Random(7).shuffle(picked)
        return picked

    def count(self) -> int:
        with self.env.begin() as txn:
            return int(txn.stat(self.records)["entries"])

    def close(self) -> None:
        self.env.close()


def lmdb_available() -> bool:
    try:
        import lmdb  # noqa: F401
    except ImportError:
        return False
    return True


class RawAppendFile:
    """The floor for a durable write: append one JSON line, then fdatasync, per record."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._sync = getattr(os, "fdatasync", os.fsync)

    def append(self, rec: RecordSpec) -> None:
        line = json.dumps(
            {"id": new_id(), "content": rec.content, "tags": sorted(rec.tags), "metadata": rec.metadata},
            sort_keys=True,
        ).encode() + b"\n"
        os.write(self.fd, line)
        self._sync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


def sha256_loop(items: Sequence[tuple[bytes, bytes | None]]) -> int:
    """SHA-256 of every entry and of every payload (salt + packed), in one plain loop; returns how many
    entries it went through."""
    sha256 = hashlib.sha256
    for entry, payload in items:
        sha256(entry).digest()
        if payload is not None:
            sha256(payload).digest()
    return len(items)
