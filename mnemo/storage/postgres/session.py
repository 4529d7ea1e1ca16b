"""What a PostgreSQL store holds before it reads or writes: its settings, its connections (the read
connection, reconnected when lost, and the queries run on it or on a writer's), this process's writer
lock, and the head and ACL it has caught up to. Writing is commit.py's; the store is store.py's."""

from __future__ import annotations

import contextlib
import struct
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from ...acl import Acl
from ...chain.codec import ZERO_HASH, EntryDecodeError, decode_entry
from ...errors import IntegrityError
from ..guards import StoreGuards
from ..types import check_durability
from ..writer import hold_writer_lock
from .dsn import display_name, session_conninfo
from .errors import storage_error

T = TypeVar("T")
# A read that also brings the head, from the one snapshot of its statement (read_fresh): the head packed
# in one column (HEAD_PACKED: seq, time and acl_seq as 8-byte big-endian integers, then its hash), whether
# the read gave a row (false: none, and the rest NULL), then the read's own columns, in its own order.
# Packed, the head is one column a row to send and to load where it was four; read with LIMIT 1 (it has
# one row), since a table without statistics is guessed at hundreds of rows, and the planner would copy
# the read's rows into a materialized list to join them to each.
WITH_HEAD = ("SELECT hd.packed, q.* FROM (SELECT int8send(seq) || int8send(ts_ns) || int8send(acl_seq) || hash "
             "AS packed FROM mnemo_head LIMIT 1) hd LEFT JOIN LATERAL (SELECT true, z.* FROM ({}) z) q ON true")
HEAD_PACKED = struct.Struct(">qqq")
# Where a read's own columns start in the rows of WITH_HEAD
HEAD_COLUMNS = 2


class FreshRead(threading.local):
    """Whether this thread's next read on the read connection is to bring the head (read_fresh)."""

    due = False


class Session(StoreGuards):
    """A store's connections and the state every part of it reads: the base of PostgresStore."""

    _read: psycopg.Connection[Any]  # made by PostgresStore.__init__, whose open time counts it

    def __init__(self, dsn: str, agent: str, *, readonly: bool, durability: str, lock_timeout: float) -> None:
        check_durability(durability)
        super().__init__(readonly, durability, lock_timeout)
        self._dsn = dsn
        self._conninfo = session_conninfo(dsn)
        self.path = display_name(dsn)
        self.agent = agent
        self._read_lock = threading.RLock()
        self._fresh = FreshRead()
        self._acl = Acl()
        self._acl_upto = -1  # the seq of the last ACL entry _acl has applied
        self._head: tuple[int, bytes, int] = (-1, ZERO_HASH, 0)
        self._write: psycopg.Connection[Any] | None = None
        self._sync: psycopg.Connection[Any] | None = None

    # -- connections ---------------------------------------------------------------------------------
    def _connect(self, autocommit: bool) -> psycopg.Connection[Any]:
        self._check_open()  # a closed store makes no connection again: close() would never close it
        try:
            conn = psycopg.connect(self._conninfo, autocommit=autocommit, connect_timeout=10)
        except psycopg.Error as exc:
            raise storage_error(exc, self.path) from None
        return conn

    @property
    def _lock_timeout_setting(self) -> str:
        """lock_timeout as a session setting, in ms: at least 1, since PostgreSQL's 0 is "no limit"."""
        return f"SET lock_timeout = {max(1, int(self.lock_timeout * 1000))}"

    def _hold_writer_lock(self) -> None:
        """Take this process's writer lock (one writer thread at a time), lock_timeout at most."""
        hold_writer_lock(self)

    def _reads(self) -> psycopg.Connection[Any]:
        """The read connection, reconnected if it broke (a server restart, a killed backend)."""
        if self._read.broken or self._read.closed:
            with contextlib.suppress(psycopg.Error):
                self._read.close()
            self._read = self._connect(autocommit=True)
        return self._read

    def _fetch(
        self, sql: str, params: Any = None, conn: psycopg.Connection[Any] | None = None, binary: bool = False
    ) -> list[Any]:
        """Rows of a query: on the given connection (a writer's, inside its transaction), else on the
        read connection, retried once on a fresh connection if the old one was lost. `binary`: the rows
        come in PostgreSQL's binary format (bytea as it is, not hex: less to make and to parse)."""
        rows, start = self._fetch_at(sql, params, conn, binary)
        return [row[start:] for row in rows] if start else rows

    def _fetch_at(
        self, sql: str, params: Any = None, conn: psycopg.Connection[Any] | None = None, binary: bool = False
    ) -> tuple[list[Any], int]:
        """The rows of _fetch, each as it came (not copied without the head's columns when the statement
        brought the head: a caller that takes columns by index adds `start` to each), and `start`, where
        the query's own columns are in them."""
        if conn is not None:
            try:
                return conn.execute(sql, params, binary=binary).fetchall(), 0
            except psycopg.Error as exc:
                raise storage_error(exc, self.path) from None
        if self._fresh.due:
            self._fresh.due = False
            return self._with_head(sql, params, binary), HEAD_COLUMNS
        with self._read_lock:
            for attempt in (0, 1):
                try:
                    return self._reads().execute(sql, params, binary=binary).fetchall(), 0
                except psycopg.OperationalError as exc:
                    if attempt or not self._read.broken:
                        raise storage_error(exc, self.path) from None
                except psycopg.Error as exc:
                    raise storage_error(exc, self.path) from None
        raise AssertionError("unreachable")

    def _with_head(self, sql: str, params: Any, binary: bool) -> list[Any]:
        """The rows of a read, its statement also bringing the head, which is caught up to (as refresh
        does): one round trip, and the head as of the read's own snapshot. Each row as it came: the
        read's own columns start at HEAD_COLUMNS."""
        rows = self._fetch(WITH_HEAD.replace("{}", sql), params, binary=binary)
        if not rows:
            raise IntegrityError(f"{self.path}: mnemo_head holds no row")
        first = rows[0]
        packed = bytes(first[0])
        seq, ts_ns, acl_seq = HEAD_PACKED.unpack_from(packed)
        self._absorb_head((seq, packed[HEAD_PACKED.size:], ts_ns, acl_seq), None)
        return rows if first[1] else []

    # -- catching up -----------------------------------------------------------------------------------
    def read_fresh(self, read: Callable[[], T]) -> T:
        """refresh(), then `read()`, in one round trip: the first read `read` makes on the read
        connection brings the head too (_with_head), and `read` runs again while the ACL that head
        names is newer than the one its scopes were made from (another writer granted or revoked)."""
        self._check_open()
        if self.current_batch() is not None:
            return read()  # we hold the head row: nobody else committed
        while True:
            upto = self._acl_upto
            self._fresh.due = True
            try:
                result = read()
                if self._fresh.due:  # it read nothing on the read connection: catch up as refresh does
                    self._fresh.due = False
                    self.refresh()
            finally:
                self._fresh.due = False
            if self._acl_upto == upto:  # read with the ACL as of its own snapshot
                return result

    def refresh(self) -> None:
        self._check_open()
        if self.current_batch() is not None:
            return  # we hold the head row: nobody else committed
        rows = self._fetch("SELECT seq, hash, ts_ns, acl_seq FROM mnemo_head")
        if not rows:
            raise IntegrityError(f"{self.path}: mnemo_head holds no row")
        self._absorb_head(rows[0], None)

    def _absorb_head(self, row: tuple[Any, ...], conn: psycopg.Connection[Any] | None) -> None:
        seq, head, ts, acl_seq = row
        if acl_seq > self._acl_upto:
            self._load_acl(acl_seq, conn)
        self._head = (seq, bytes(head), ts)

    def _load_acl(self, upto: int, conn: psycopg.Connection[Any] | None) -> None:
        rows = self._fetch(
            "SELECT seq, raw FROM mnemo_entries WHERE op IN ('genesis', 'grant', 'revoke') AND seq > %s "
            "AND seq <= %s ORDER BY seq", [self._acl_upto, upto], conn,
        )
        acl = self._acl.copy()
        for seq, raw in rows:
            try:
                entry = decode_entry(bytes(raw))
                if entry.seq != seq:
                    raise EntryDecodeError(f"its bytes say seq {entry.seq}")
                body = entry.body
                if entry.op == "genesis":
                    acl.owner = entry.agent
                elif entry.op == "grant":
                    acl.grant(body["principal"], body["scope"], body["perms"])
                else:
                    acl.revoke(body["principal"], body["scope"], body["perms"])
            except (EntryDecodeError, KeyError, TypeError) as exc:
                raise IntegrityError(f"{self.path}: the ACL entry at seq {seq} is unreadable: {exc}") from None
        self._acl, self._acl_upto = acl, upto

    def _close_connections(self) -> None:
        for conn in (self._read, self._write, self._sync):
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    conn.close()


__all__ = ["Session"]
