"""PostgresStore's part that serves the chain: its head and the ACL as of it (an open transaction's own,
inside one), the Merkle tree over its entries (continued from the compact range saved in mnemo_tree,
which persist() saves again), every entry in order (log), and the check of it all (verify.py)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import psycopg

from ...acl import Acl
from ...chain.codec import EntryDecodeError, decode_entry
from ...chain.tree import CompactRange
from ...errors import IntegrityError, MnemoError
from ...record import VerifyReport
from ..types import LogItem, Progress
from .commit import Commits
from .errors import storage_error
from .verify import verify_postgres

TREE_SAVE_EVERY = 1024  # entries between saved compact ranges of the tree


class Chain(Commits):
    """The chain: its head, its tree, its entries, its check."""

    db_id: bytes  # read from mnemo_meta at open (store.py)

    def __init__(self, dsn: str, agent: str, *, readonly: bool, durability: str, lock_timeout: float) -> None:
        super().__init__(dsn, agent, readonly=readonly, durability=durability, lock_timeout=lock_timeout)
        self._tree: Any = None  # the CompactRange of the tree as far as this store has read (tree_head)
        self._tree_saved = 0
        self._tree_lock = threading.Lock()

    def head(self) -> tuple[int, bytes]:
        batch = self.current_batch()
        if batch is not None:
            self._batch_conn()  # the head is state: a blind batch that asks for it locks first
            return batch.head_seq, batch.head_hash
        return self._head[0], self._head[1]

    def acl(self) -> Acl:
        batch = self.current_batch()
        return batch.acl if batch is not None else self._acl

    def tree_head(self) -> tuple[int, bytes]:
        """The tree over the entries up to the head: continued from the compact range this store last
        held, or from the latest one saved in mnemo_tree (checked as it is used: a saved range that
        does not continue into the entries read after it is dropped and the tree read from seq 0)."""
        seq, _head = self.head()
        with self._tree_lock:
            compact = self._tree
            if compact is None:
                rows = self._fetch("SELECT size, range FROM mnemo_tree WHERE size <= %s ORDER BY size DESC LIMIT 1",
                                   [seq + 1], self._batch_conn())
                try:
                    compact = CompactRange.from_bytes(bytes(rows[0][1])) if rows else CompactRange()
                    if rows and compact.size != rows[0][0]:
                        raise ValueError("a saved range of another size")
                except Exception:  # a saved range that is not one: the entries are the truth
                    compact = CompactRange()
            if compact.size < seq + 1:
                raws = self._fetch("SELECT raw FROM mnemo_entries WHERE seq >= %s AND seq <= %s ORDER BY seq",
                                   [compact.size, seq], self._batch_conn())
                compact.add_entries(bytes(r[0]) for r in raws)
            if compact.size != seq + 1:
                raise IntegrityError(f"{self.path}: the entries up to seq {seq} are not all there")
            self._tree = compact
            head = compact.head()
            return head.size, head.root

    def _save_tree(self) -> None:
        """Save the compact range this store holds, if it is far enough ahead of the saved ones."""
        compact = self._tree
        if compact is None or compact.size - self._tree_saved < TREE_SAVE_EVERY or self.readonly:
            return
        with contextlib.suppress(MnemoError):
            self._fetch("INSERT INTO mnemo_tree (size, range) VALUES (%s, %s) ON CONFLICT DO NOTHING "
                        "RETURNING size", [compact.size, compact.to_bytes()])
            self._tree_saved = compact.size

    def log(self, since: int = 0, payloads: bool = False) -> Iterator[LogItem]:
        """Every entry from `since` on, in seq order, through a server-side cursor (a snapshot of the
        chain as of the first row: later commits are not included)."""
        conn = self._connect(autocommit=False)
        try:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            with conn.cursor(name="mnemo_log") as cur:
                cur.itersize = 2000
                cur.execute(
                    "SELECT e.seq, e.raw, p.seq IS NOT NULL, " + ("p.payload " if payloads else "NULL ")
                    + "FROM mnemo_entries e LEFT JOIN mnemo_payloads p ON p.seq = e.seq WHERE e.seq >= %s "
                    "ORDER BY e.seq", [since],
                )
                for seq, raw, present, payload in cur:
                    try:
                        entry = decode_entry(bytes(raw))
                    except EntryDecodeError as exc:
                        raise IntegrityError(f"{self.path}: the entry at seq {seq} does not decode: {exc}") from None
                    if entry.seq != seq:
                        raise IntegrityError(f"{self.path}: the row of seq {seq} holds the entry of seq {entry.seq}")
                    state = "ok" if present else ("erased" if entry.op == "put" else "none")
                    yield LogItem(entry, state, bytes(payload) if payload is not None else None, None)
        except psycopg.Error as exc:
            raise storage_error(exc, self.path) from None
        finally:
            conn.close()

    def verify(
        self, pubkey: bytes | None, expect_head: tuple[int, str] | None, progress: Progress | None = None,
        embeddings: str = "check",
    ) -> VerifyReport:
        return verify_postgres(self, pubkey, expect_head, progress, embeddings == "recompute")

    def persist(self) -> None:
        """The tables are the index; what is saved is the tree's compact range (mnemo_tree)."""
        self._save_tree()


__all__ = ["TREE_SAVE_EVERY", "Chain"]
