"""The PostgreSQL backend: the same chain as the log file, in tables (the schema package), for agents on many
machines. Implements the storage contract (mnemo/storage/contract.py).

PostgresStore is one class made of parts, each in its own module and each a base class of it, over
session.py (its connections, and the head and ACL it has caught up to) and commit.py (the writes: one
order, two commit paths, group commit): the contract's reads (reads.py), recall by words over the text
index (text_recall.py) and by meaning (meaning.py), the chain (chain.py: its head, tree, log and
verify) and compaction (compaction.py). This module puts them together, opens the schema (creating or
migrating it), chooses the recall, and closes.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

import psycopg

from ...chain.codec import ZERO_HASH, make_entry
from ...errors import IntegrityError, MnemoError, NotFound, StorageError
from ...recall.embedding import Embedder
from ...recall.query import Query as RecallQuery
from ..recall import Hit
from ..types import BATCH_INTERVAL, Query, ScopeFilter
from . import schema
from .chain import TREE_SAVE_EVERY as TREE_SAVE_EVERY  # re-exported: it was this module's
from .chain import Chain
from .commit import PIPELINE_MAX_BYTES as PIPELINE_MAX_BYTES  # re-exported: tests size commits by it
from .compaction import Compaction
from .dsn import application_dsn, display_name, grant_application_role
from .errors import storage_error
from .meaning import Meaning
from .reads import SERVED_COLUMNS as SERVED_COLUMNS  # re-exported: it was this module's
from .schema import SCHEMA_LOCK
from .text_recall import PREFETCH_SLACK as PREFETCH_SLACK  # re-exported: it was this module's


class PostgresStore(Meaning, Chain, Compaction):
    """A Mnemo database in a PostgreSQL schema. Thread-safe; processes on any number of hosts may share it."""

    def __init__(
        self, dsn: str, agent: str, *, readonly: bool = False, durability: str = "fsync",
        lock_timeout: float = 10.0, create: bool = True, embedder: Embedder | None = None, reindex: bool = False,
    ) -> None:
        super().__init__(dsn, agent, readonly=readonly, durability=durability, lock_timeout=lock_timeout)
        self.recovery: list[str] = []
        self._stop = threading.Event()
        self._batch_thread: threading.Thread | None = None
        t0 = time.perf_counter()
        self._read = self._connect(autocommit=True)
        try:
            self._open(create)
            self._open_vectors(embedder, reindex)
        except BaseException:
            self._close_connections()
            raise
        self.open_seconds = time.perf_counter() - t0
        if durability == "batch" and not readonly:
            self._batch_thread = threading.Thread(target=self._batch_flusher, daemon=True, name="mnemo-pg-sync")
            self._batch_thread.start()

    # -- opening -------------------------------------------------------------------------------------
    def _open(self, create: bool) -> None:
        conn = self._read
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(current_schema() || %s))", [SCHEMA_LOCK])
                exists = conn.execute("SELECT to_regclass('mnemo_meta') IS NOT NULL").fetchone()
                if not (exists and exists[0]):
                    if self.readonly or not create:
                        raise NotFound(f"no Mnemo database at {self.path}")
                    if conn.execute("SELECT current_schema()").fetchone() == (None,):
                        raise StorageError(f"{self.path}: the first schema of the search_path does not exist")
                    self._create(conn)
                else:
                    self._check_schema(conn)
                row = conn.execute("SELECT db_id FROM mnemo_meta").fetchone()
        except psycopg.Error as exc:
            raise storage_error(exc, self.path) from None
        if row is None:
            raise IntegrityError(f"{self.path}: mnemo_meta holds no row")
        self.db_id = bytes(row[0])
        self.refresh()
        if self._head[0] < 0:
            raise IntegrityError(f"{self.path}: the chain holds no genesis entry")

    def _create(self, conn: psycopg.Connection[Any]) -> None:
        """The schema, its meta row, and the genesis entry, in the one transaction of the caller."""
        schema.migrate(conn, 0)
        db_id = os.urandom(16)
        genesis = make_entry(0, time.time_ns(), ZERO_HASH, "genesis", self.agent, {"db_id": db_id, "format": 1})
        conn.execute("INSERT INTO mnemo_meta (schema_version, db_id) VALUES (%s, %s)", [schema.SCHEMA_VERSION, db_id])
        conn.execute("INSERT INTO mnemo_entries (seq, op, raw, hash) VALUES (0, 'genesis', %s, %s)",
                     [genesis.raw, genesis.hash])
        conn.execute("INSERT INTO mnemo_head (seq, hash, ts_ns, acl_seq) VALUES (0, %s, %s, 0)",
                     [genesis.hash, genesis.ts_ns])

    def _check_schema(self, conn: psycopg.Connection[Any]) -> None:
        row = conn.execute("SELECT schema_version FROM mnemo_meta").fetchone()
        if row is None:  # its creator writes it in the transaction that makes the tables: this is damage
            raise IntegrityError(f"{self.path}: mnemo_meta holds no row")
        version = int(row[0])
        if version > schema.SCHEMA_VERSION:
            raise StorageError(
                f"{self.path} holds a Mnemo schema of version {version}, newer than this version of Mnemo "
                f"understands ({schema.SCHEMA_VERSION}): upgrade Mnemo to open it"
            )
        if version < schema.SCHEMA_VERSION:
            if self.readonly:
                raise StorageError(
                    f"{self.path} holds a Mnemo schema of version {version}; open it once as a writer to "
                    f"migrate it to version {schema.SCHEMA_VERSION}"
                )
            schema.migrate(conn, version)
            self.recovery.append(f"migrated the schema from version {version} to {schema.SCHEMA_VERSION}")

    # -- the contract: recall -------------------------------------------------------------------------
    def recall(
        self, query: RecallQuery, scopes: ScopeFilter, tags: Query, limit: int, mode: str = "lexical"
    ) -> list[Hit]:
        """Recall by words, over the text index (text_recall.py), or in the modes "semantic" and "hybrid" by
        meaning, over the vectors (meaning.py)."""
        if limit == 0:
            return []
        if mode != "lexical":
            return self._recall_by_meaning(query, scopes, tags, limit, mode)
        return self._recall_by_words(query, scopes, tags, limit)

    # -- the contract: the database --------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        rows = self._fetch(
            "SELECT current_setting('server_version'), (SELECT schema_version FROM mnemo_meta), "
            "coalesce(sum(pg_total_relation_size(to_regclass(t))), 0) FROM unnest(%s::text[]) t",
            [list(schema.TABLES)],
        )
        server, version, size = rows[0]
        # the tables' size is the whole database's, as the log file's is: stats() shows it to admins only
        return {"backend": "postgresql", "server_version": server, "schema_version": version,
                "log_bytes": int(size), "open_seconds": self.open_seconds}

    # -- closing ---------------------------------------------------------------------------------------
    def _batch_flusher(self) -> None:
        while not self._stop.wait(BATCH_INTERVAL):
            if self._flushed < self._commits and self._failed is None:
                with contextlib.suppress(MnemoError):
                    self._flush(self._commits)

    def close(self) -> None:
        if self.closed:
            return
        self._stop.set()
        if self._batch_thread is not None:
            self._batch_thread.join()
        try:
            if self._failed is None and not self.readonly and self.durability != "none" and self._commits:
                with contextlib.suppress(MnemoError):
                    self._flush(self._commits)
            if self._failed is None:
                self._save_tree()
        finally:
            self.closed = True
            self._close_connections()


def open_postgres(
    dsn: str, agent: str, *, readonly: bool = False, durability: str = "fsync", lock_timeout: float = 10.0,
    embedder: Embedder | None = None, reindex: bool = False,
) -> PostgresStore:
    return PostgresStore(dsn, agent, readonly=readonly, durability=durability, lock_timeout=lock_timeout,
                         embedder=embedder, reindex=reindex)


__all__ = [
    "PostgresStore", "application_dsn", "display_name", "grant_application_role", "open_postgres", "storage_error",
]
