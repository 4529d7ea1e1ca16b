"""The PostgreSQL backend: the same chain as the log file, in tables (schema.py), for agents on many
machines. Implements the storage contract (mnemo/storage/contract.py).

One order: every writer locks the single `mnemo_head` row `FOR UPDATE` inside the transaction that
commits its entries, and holds it from the reads of a read-modify-write to the commit, so seqs are
gap-free and each entry links to the one before, whatever process or host wrote it.

Group commit: a writer commits with `synchronous_commit = off`, so the head row is released as soon as
the commit record is written, and then waits for that record to be flushed by committing a tiny
transaction with `synchronous_commit = on` (its flush covers every commit before it): for a remember,
inside the one call that commits it (the procedure mnemo_put, which also builds the entry under the
lock); for other writes, on a second connection, where the threads of a process waiting meanwhile share
one. Waits of many writers, in this process and in others, share the server's WAL flushes, while the
lock is held only for the work itself. A write returns only once it is durable (durability="fsync").
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import Conninfo

from ...acl import Acl
from ...chain.codec import (
    ZERO_HASH,
    Entry,
    EntryDecodeError,
    decode_entry,
    decode_record_fields,
    make_entry,
    pack_canonical,
    served_digest_problem,
    served_put_problem,
    unpackb,
)
from ...chain.tree import CompactRange
from ...errors import (
    DurabilityError,
    IntegrityError,
    LockTimeout,
    MnemoError,
    NotFound,
    PermissionDenied,
    StorageError,
)
from ...record import VerifyReport
from ..batch import ACL_OPS, Batch, apply_entry
from ..guards import StoreGuards
from ..types import (
    BATCH_INTERVAL,
    Found,
    LogItem,
    Payloads,
    Progress,
    Query,
    Rec,
    ScopeFilter,
    Usage,
    Version,
    check_durability,
)
from . import horizon, schema
from .verify import verify_postgres

# A commit whose rows come to more than this is sent outside a pipeline (one round trip more, nothing
# next to its size): psycopg 3.3's pipeline mode stops sending a query of several MB part way and then
# waits for its result for ever, the server waiting for the rest (psycopg 3.3.9: 16 records of 900 kB hang,
# 12 do not; test_store_basic.py's test_a_transaction_of_many_megabytes_commits_whole commits 20).
PIPELINE_MAX_BYTES = 1 << 20
FLUSH_WAIT = 0.005  # how long a flush may wait for this process's writes in progress, to cover them too
TREE_SAVE_EVERY = 1024  # entries between saved compact ranges of the tree
SCHEMA_LOCK = "mnemo.schema"  # advisory lock key text: creators and migrators of one schema take turns

_VERSION_COLUMNS = "v.ver, v.seq, v.ts_ns, v.agent, v.size, v.hash, v.entry_len, v.payload_len"
_TAGS = "(SELECT coalesce(array_agg(t.tag ORDER BY t.tag), '{}') FROM mnemo_tags t WHERE t.id = r.id)"
# A record's versions, looked up by key for each record `r` (OFFSET 0: never flattened into a join)
_VERSIONS = "(SELECT * FROM mnemo_versions w WHERE w.id = r.id OFFSET 0) v"
_PUT = (
    "CALL mnemo_put(%s, %s, %s::bigint[], %s::bytea[], %s::bytea[], %s::text[], %s::text[], %s::text[], "
    "%s::bigint[], %s::text[], %s::integer[])"
)
_COMMIT = (
    "SELECT mnemo_commit(%s::bigint[], %s::text[], %s::bytea[], %s::bytea[], %s::bigint[], %s::bytea[], "
    "%s::text[], %s::text[], %s::text[], %s::text[], %s::integer[], %s::text[], %s::text[], %s::integer[], "
    "%s::text[], %s::integer[], %s::bigint[], %s::bigint[], %s::text[], %s::bigint[], %s::bytea[], "
    "%s::integer[], %s::integer[], %s::text[], %s::text[], %s::text[], %s, %s, %s, %s)"
)


UNREADABLE_DSN = "postgresql://(an unreadable DSN)"


def display_name(dsn: str) -> str:
    """The DSN without its password, for messages and stats."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return UNREADABLE_DSN
    params.pop("password", None)
    host = params.get("host", "")
    port = params.get("port", "")
    user = params.get("user", "")
    where = f"{user}@" if user else ""
    where += f"{host}:{port}" if port else str(host)
    return f"postgresql://{where}/{params.get('dbname', '')}"


def _session_conninfo(dsn: str) -> str:
    """`dsn` with the session settings every connection of a store starts with, added to the options
    it may hold already (a search_path): no JIT compilation, which costs tens of milliseconds on
    queries whose plans take a fraction of one (the planner's costs of them, on guessed row counts of
    tables it has no statistics of, can pass jit_above_cost)."""
    params = dsn_params(dsn)
    params["options"] = (str(params.get("options", "")) + " -c jit=off").strip()
    return make_conninfo("", **params)


def dsn_params(dsn: str) -> dict[str, Any]:
    """The parameters of `dsn`; a StorageError that does not quote it when libpq cannot read it (every
    connection is made from a DSN read here first, so that libpq's own refusal is never shown)."""
    try:
        return conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise unreadable_dsn(dsn, exc) from None


def unreadable_dsn(dsn: str, exc: psycopg.ProgrammingError) -> StorageError:
    """libpq's reason for refusing a DSN, without the pieces of the DSN it quotes: one can be the
    password (`password=x secret` is refused with 'missing "=" after "secret"', a URI with an unclosed
    bracket is quoted whole). Connection keywords and single characters are kept; when the DSN holds
    a double quote of its own, where a quoted piece ends cannot be told, and the reason ends before its
    first quote."""
    reason = _first_line(exc)
    if '"' in dsn:
        before, quote, _rest = reason.partition('"')
        reason = before.rstrip(" :") + " … (left out: it quotes the DSN, which holds a quote)" if quote else reason
    else:
        keywords = {option.keyword.decode() for option in Conninfo.get_defaults()}
        reason = re.sub(r'"([^"]*)"', lambda m: m[0] if len(m[1]) <= 1 or m[1] in keywords else '"…"', reason)
    return StorageError(f"PostgreSQL at {UNREADABLE_DSN} failed: {reason}")


def storage_error(exc: BaseException, what: str) -> MnemoError:
    """A psycopg error as the MnemoError a caller can act on."""
    if isinstance(exc, MnemoError):
        return exc
    if isinstance(exc, pg_errors.LockNotAvailable):
        return LockTimeout(f"could not take the writer lock on {what} in time: another writer holds it")
    if isinstance(exc, pg_errors.InsufficientPrivilege):
        return StorageError(f"PostgreSQL at {what} refused: {_first_line(exc)} (a role with more privileges "
                            "is needed for this, see docs/POSTGRES.md)")
    if isinstance(exc, pg_errors.QueryCanceled):  # an OperationalError, but on a connection still up
        return StorageError(f"PostgreSQL at {what} cancelled the statement: {_first_line(exc)} (a "
                            "statement_timeout or an operator's cancel; the connection is still usable)")
    if isinstance(exc, psycopg.OperationalError):
        return StorageError(f"PostgreSQL at {what} is unreachable or the connection was lost: {_first_line(exc)}")
    return StorageError(f"PostgreSQL at {what} failed: {_first_line(exc)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _prefix_sql(column: str, prefix: str) -> tuple[str, list[Any]]:
    """A condition that `column` (of collation "C": bytes order, which is code point order) starts with
    `prefix`, and its parameters: the LIKE says it exactly; the range beside it is what an index scan
    bounds itself by, also in a generic plan, where the planner does not see the pattern."""
    upper = _successor(prefix)
    sql = f"{column} LIKE %s AND {column} >= %s" + ("" if upper is None else f" AND {column} < %s")
    return sql, [_like_prefix(prefix), prefix] + ([] if upper is None else [upper])


def _successor(prefix: str) -> str | None:
    """The least string above every string that starts with `prefix`, or None if there is none."""
    chars = list(prefix)
    while chars:
        code = ord(chars.pop()) + 1
        if code == 0xD800:
            code = 0xE000  # surrogates are no characters of a stored text
        if code <= 0x10FFFF:
            return "".join(chars) + chr(code)
    return None


def _scope_sql(scopes: ScopeFilter, column: str = "r.scope") -> tuple[str, list[Any]]:
    """A WHERE condition admitting exactly the scopes `scopes` admits, and its parameters."""
    parts: list[str] = []
    params: list[Any] = []
    if not scopes.everything:
        parts.append(f"({column} = ANY(%s::text[]) OR {column} LIKE ANY(%s::text[]))")
        params += [sorted(scopes.exact), [_like_prefix(p) for p in scopes.prefixes]]
    requested = scopes.requested
    if requested is not None:
        if requested.endswith("*"):
            sql, prefix_params = _prefix_sql(column, requested[:-1])
            parts.append(sql)
            params += prefix_params
        else:
            parts.append(f"{column} = %s")
            params.append(requested)
    return (" AND ".join(parts) or "true"), params


def _select_source(query: Query) -> tuple[str, list[Any], list[tuple[str, list[Any]]]]:
    """The FROM clause of a select's records `r`, its parameters, and the conditions left on `r`.

    Whenever the query names tags, the tag index drives: its key is (tag, id), so the candidates come by
    an index range and each finds its record by key. The LATERAL subquery ends in OFFSET 0 so that the
    planner cannot flatten it into a join costed on guesses (it keeps no statistics of tags, schema.py,
    and none at all of a table autovacuum has not analysed yet): the plan stays index lookups."""
    conds: list[tuple[str, list[Any]]] = []
    params: list[Any]
    if query.tags:
        driver, params = "SELECT t0.id FROM mnemo_tags t0 WHERE t0.tag = %s", [query.tags[0]]
        conds += [(f"EXISTS (SELECT 1 FROM mnemo_tags t{i} WHERE t{i}.tag = %s AND t{i}.id = r.id)", [tag])
                  for i, tag in enumerate(query.tags[1:], 1)]
    elif query.any_tags:
        driver = "SELECT DISTINCT t0.id FROM mnemo_tags t0 WHERE t0.tag = ANY(%s::text[])"
        params = [list(query.any_tags)]
    elif query.tag_prefix is not None:
        sql, params = _prefix_sql("t0.tag", query.tag_prefix)
        driver = f"SELECT DISTINCT t0.id FROM mnemo_tags t0 WHERE {sql}"
    else:
        return "mnemo_records r", [], conds
    if query.any_tags and query.tags:
        conds.append(("EXISTS (SELECT 1 FROM mnemo_tags a WHERE a.id = r.id AND a.tag = ANY(%s::text[]))",
                      [list(query.any_tags)]))
    if query.tag_prefix is not None and (query.tags or query.any_tags):
        sql, prefix_params = _prefix_sql("p.tag", query.tag_prefix)
        conds.append((f"EXISTS (SELECT 1 FROM mnemo_tags p WHERE p.id = r.id AND {sql})", prefix_params))
    source = (f"({driver}) c CROSS JOIN LATERAL "
              "(SELECT x.id, x.scope, x.ver FROM mnemo_records x WHERE x.id = c.id OFFSET 0) r")
    return source, params, conds


def _version(row: tuple[Any, ...]) -> Version:
    ver, seq, ts_ns, agent, size, hash_, entry_len, payload_len = row
    # the row keys stand where the log file keeps offsets: the entry and its payload are both found by seq
    return Version(ver, seq, ts_ns, agent, size, bytes(hash_), seq, payload_len, seq, entry_len)


def _put_tags(packed: bytes) -> tuple[str, ...] | None:
    """The tags in a put's packed fields, or None if they do not read as a list of strings (the client,
    which decodes the fields it is served, says what is wrong with them)."""
    try:
        return _str_tags(list(decode_record_fields(packed)[1]))
    except Exception:  # msgpack raises several unrelated types on garbage
        return None


def _str_tags(tags: Any) -> tuple[str, ...] | None:
    return tuple(tags) if type(tags) is list and all(type(tag) is str for tag in tags) else None


class _View:
    """What a batch reads through to: the committed state, on the writer's connection, under the lock."""

    def __init__(self, store: PostgresStore, conn: psycopg.Connection[Any] | None, acl: Acl,
                 acl_seq: int = -1) -> None:
        self.store = store
        self.conn = conn  # None: a blind batch, built without the head row (see PostgresStore._append)
        self._acl = acl
        self.acl_seq = acl_seq  # the last ACL entry of the ACL the batch's checks used
        self.known: dict[str, Rec | None] = {}  # prefetched records (commit replay)

    @property
    def acl(self) -> Acl:
        return self._acl

    def get_rec(self, rec_id: str) -> Rec | None:
        if rec_id in self.known:
            return self.known[rec_id]
        return self.store._recs(self.store._batch_conn(), [rec_id]).get(rec_id)

    def prefetch(self, ids: list[str]) -> None:
        missing = [i for i in ids if i not in self.known]
        if missing:
            found = self.store._recs(self.conn, missing)
            for rec_id in missing:
                self.known[rec_id] = found.get(rec_id)


class PostgresStore(StoreGuards):
    """A Mnemo database in a PostgreSQL schema. Thread-safe; processes on any number of hosts may share it."""

    def __init__(
        self, dsn: str, agent: str, *, readonly: bool = False, durability: str = "fsync",
        lock_timeout: float = 10.0, create: bool = True,
    ) -> None:
        check_durability(durability)
        self._dsn = dsn
        self._conninfo = _session_conninfo(dsn)
        self.path = display_name(dsn)
        self.agent = agent
        self.readonly = readonly
        self.durability = durability
        self.lock_timeout = lock_timeout
        self.recovery: list[str] = []
        self.closed = False
        self._failed: BaseException | None = None
        self._mutex = threading.RLock()  # one writer thread of this process at a time
        self._read_lock = threading.RLock()
        self._local = threading.local()
        self._flush_lock = threading.Lock()  # held while flushing: waiters meanwhile share the next flush
        self._ticket_lock = threading.Lock()  # numbers commits; never held while flushing, so that
        self._commits = 0  # commits go on during a flush (this process's commits so far)
        self._writes = threading.Condition(threading.Lock())  # notified as each write in progress ends
        self._writing = 0  # threads of this process between writing()'s start and their commit
        self._flushed = 0
        self._acl = Acl()
        self._acl_upto = -1  # the seq of the last ACL entry _acl has applied
        self._head: tuple[int, bytes, int] = (-1, ZERO_HASH, 0)
        self._tree: Any = None  # the CompactRange of the tree as far as this store has read (tree_head)
        self._tree_saved = 0
        self._tree_lock = threading.Lock()
        self._write: psycopg.Connection[Any] | None = None
        self._sync: psycopg.Connection[Any] | None = None
        self._stop = threading.Event()
        self._batch_thread: threading.Thread | None = None
        t0 = time.perf_counter()
        self._read = self._connect(autocommit=True)
        try:
            self._open(create)
        except BaseException:
            self._close_connections()
            raise
        self.open_seconds = time.perf_counter() - t0
        if durability == "batch" and not readonly:
            self._batch_thread = threading.Thread(target=self._batch_flusher, daemon=True, name="mnemo-pg-sync")
            self._batch_thread.start()

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
        if not self._mutex.acquire(timeout=self.lock_timeout):
            raise LockTimeout(f"another thread held the writer lock for over {self.lock_timeout} s")

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
        if conn is not None:
            try:
                return conn.execute(sql, params, binary=binary).fetchall()
            except psycopg.Error as exc:
                raise storage_error(exc, self.path) from None
        with self._read_lock:
            for attempt in (0, 1):
                try:
                    return self._reads().execute(sql, params, binary=binary).fetchall()
                except psycopg.OperationalError as exc:
                    if attempt or not self._read.broken:
                        raise storage_error(exc, self.path) from None
                except psycopg.Error as exc:
                    raise storage_error(exc, self.path) from None
        raise AssertionError("unreachable")

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
        import os

        schema.migrate(conn.execute, 0)
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
            schema.migrate(conn.execute, version)
            self.recovery.append(f"migrated the schema from version {version} to {schema.SCHEMA_VERSION}")

    # -- catching up -----------------------------------------------------------------------------------
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

    # -- the contract: state -------------------------------------------------------------------------
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

    def _batch_conn(self) -> psycopg.Connection[Any] | None:
        """The connection reads of this thread's batch go through: the writer's, in its transaction. A
        blind batch that turns out to read takes the head row first, as any other would have."""
        batch = self.current_batch()
        if batch is None:
            return None
        view = batch.base
        assert isinstance(view, _View)
        if view.conn is None:
            self._lock_blind(batch)
        return self._write

    # -- the contract: reads ---------------------------------------------------------------------------
    def _recs(self, conn: psycopg.Connection[Any] | None, ids: list[str]) -> dict[str, Rec]:
        """The committed records with these ids, whoever may read them."""
        rows = self._fetch(
            f"SELECT r.id, r.scope, {_TAGS}, {_VERSION_COLUMNS} FROM mnemo_records r CROSS JOIN LATERAL {_VERSIONS} "
            "WHERE r.id = ANY(%s::text[]) ORDER BY r.id, v.ver", [ids], conn,
        )
        return {rec.id: rec for rec, _p in self._group(rows, with_payloads=False)}

    def _group(self, rows: list[Any], with_payloads: bool) -> Iterator[tuple[Rec, list[tuple[Any, Any]]]]:
        """Recs from rows of (id, scope, tags, version columns..., [raw, payload]) in (id, ver) order,
        with the (raw, payload) of each version that carries them."""
        i = 0
        while i < len(rows):
            rec_id, scope, tags = rows[i][0], rows[i][1], rows[i][2]
            versions: list[Version] = []
            loaded: list[tuple[Any, Any]] = []
            while i < len(rows) and rows[i][0] == rec_id:
                row = rows[i]
                versions.append(_version(row[3:11]))
                loaded.append((row[11], row[12]) if with_payloads else (None, None))
                i += 1
            yield Rec(rec_id, scope, tuple(tags), tuple(versions)), loaded

    def _checked(self, rec: Rec, version: Version, raw: Any, payload: Any, batch: Batch | None) -> bytes:
        if batch is not None:
            staged = batch.staged_packed(version)
            if staged is not None:
                return staged
        if raw is None or payload is None:
            raise self._missing(rec, version)
        payload = bytes(payload)
        why = served_put_problem(bytes(raw), version.hash, rec.id, version.ver, rec.scope, payload)
        if why is not None:
            raise IntegrityError(f"{self.path}: the payload of seq {version.seq} is not served: {why}")
        return bytes(payload[16:])

    def _missing(self, rec: Rec, version: Version) -> IntegrityError:
        return IntegrityError(f"{self.path}: the payload of record {rec.id} version {version.ver} (seq "
                              f"{version.seq}) is missing, though the record is live")

    def _summary_tags(self, rec: Rec, raw: Any, summary: Any) -> tuple[str, ...] | None:
        """The tags of the latest put of `rec`, from the server's summary of its payload
        (mnemo_payload_summary: its SHA-256, length and tags), checked as _checked checks a payload but
        by the digest and length the server computed: no content leaves the server. None if the tags do
        not read as a list of strings."""
        version = rec.latest
        if raw is None or summary is None:
            raise self._missing(rec, version)
        digest, length, tags = summary
        why = served_digest_problem(bytes(raw), version.hash, rec.id, version.ver, rec.scope, bytes(digest),
                                    int.from_bytes(length, "big"))
        if why is not None:
            raise IntegrityError(f"{self.path}: the payload of seq {version.seq} is not served: {why}")
        try:
            return _str_tags(unpackb(bytes(tags)))
        except Exception:  # msgpack raises several unrelated types on garbage; no tags: `tags` is None
            return None

    def get(self, rec_id: str, scopes: ScopeFilter, payloads: Payloads = "latest") -> Found | None:
        batch = self.current_batch()
        conn = self._batch_conn()
        if batch is not None and rec_id in batch.recs:
            rec = batch.recs[rec_id]
            if rec is None or not scopes.admits(rec.scope):
                return None
            return self._overlay_found(rec, payloads, batch, conn)
        want = {"none": "false", "latest": "v.ver = r.ver", "all": "true"}[payloads]
        where, params = _scope_sql(scopes)
        # The scope filter is part of the query: a record the caller may not read comes back exactly
        # as a missing one does, from the same work.
        # Every row by its key (as in select: lookups the planner cannot turn into scans of the chain).
        rows = self._fetch(
            f"SELECT r.id, r.scope, {_TAGS}, {_VERSION_COLUMNS}, "
            f"CASE WHEN {want} THEN (SELECT e.raw FROM mnemo_entries e WHERE e.seq = v.seq) END, "
            f"CASE WHEN {want} THEN (SELECT p.payload FROM mnemo_payloads p WHERE p.seq = v.seq) END "
            f"FROM mnemo_records r CROSS JOIN LATERAL {_VERSIONS} "
            f"WHERE r.id = %s AND {where} ORDER BY v.ver", [rec_id, *params], conn, binary=True,
        )
        for rec, loaded in self._group(rows, with_payloads=True):
            return self._found(rec, loaded, payloads, batch)
        return None

    def _found(self, rec: Rec, loaded: list[tuple[Any, Any]], payloads: Payloads, batch: Batch | None) -> Found:
        if payloads == "none":
            return Found(rec)
        pairs = list(zip(rec.versions, loaded, strict=True))
        if payloads == "latest":
            pairs = pairs[-1:]
        return Found(rec, tuple(self._checked(rec, v, raw, p, batch) for v, (raw, p) in pairs))

    def _overlay_found(
        self, rec: Rec, payloads: Payloads, batch: Batch, conn: psycopg.Connection[Any] | None
    ) -> Found:
        if payloads == "none":
            return Found(rec)
        versions = rec.versions if payloads == "all" else rec.versions[-1:]
        stored = [v.seq for v in versions if v.slot_off >= 0]
        rows = self._fetch(
            "SELECT e.seq, e.raw, (SELECT p.payload FROM mnemo_payloads p WHERE p.seq = e.seq) FROM mnemo_entries e "
            "WHERE e.seq = ANY(%s::bigint[])", [stored], conn,
        ) if stored else []
        by_seq = {seq: (raw, payload) for seq, raw, payload in rows}
        return Found(rec, tuple(
            self._checked(rec, v, *by_seq.get(v.seq, (None, None)), batch) for v in versions
        ))

    def select(self, query: Query, scopes: ScopeFilter, payloads: bool = True) -> list[Found]:
        """The records `query` and `scopes` admit. A record's tags are those of its latest put, read from
        the payload that put's entry commits to and checked against it (when no payload is asked for, by
        the digest, length and tags the server reads from it: no content is sent). A mnemo_tags row,
        which the application role can write, only makes a record a candidate: one whose put does not
        hold the tags asked for is left out (verify names the row that put it there), and the query is
        read again without it, so that a limit is still met."""
        left_out: list[str] = []
        while True:
            found, misses = self._select(query, scopes, payloads, left_out)
            if not misses or query.limit is None:
                return found
            left_out += misses

    def _select(
        self, query: Query, scopes: ScopeFilter, payloads: bool, left_out: list[str], check_tags: bool = True
    ) -> tuple[list[Found], list[str]]:
        """One read of select, without the records `left_out`: what it found, and the ids of the
        candidates whose checked tags do not match. Without `check_tags`, the tags are mnemo_tags' and no
        payload is read unless asked for (counts)."""
        batch = self.current_batch()
        conn = self._batch_conn()
        overlay = batch.recs if batch is not None else {}
        source, params, conds = _select_source(query)
        where, scope_params = _scope_sql(scopes)
        conds.insert(0, (where, scope_params))
        # The overlay's records are left out of what the tables hold: by the query when it has a limit
        # (which must count the others only), else below, so as not to send every id of a long
        # transaction with each read of it. Records whose checked tags did not match are left out here.
        excluded = [*left_out, *(overlay if query.limit is not None else ())]
        if excluded:
            conds.append(("NOT (r.id = ANY(%s::text[]))", [excluded]))
        for _sql, cond_params in conds:
            params += cond_params
        limit = "" if query.limit is None else f" LIMIT {int(query.limit)}"
        # the latest version's entry, and its payload, or what checks it without its content
        payload = "p.payload" if payloads else "mnemo_payload_summary(p.payload)"
        loaded = (
            "CASE WHEN v.ver = h.ver THEN (SELECT e.raw FROM mnemo_entries e WHERE e.seq = v.seq) END, "
            f"CASE WHEN v.ver = h.ver THEN (SELECT {payload} FROM mnemo_payloads p WHERE p.seq = v.seq) END"
        ) if payloads or check_tags else "NULL, NULL"
        rows = self._fetch(
            f"WITH h AS MATERIALIZED (SELECT r.id, r.scope, r.ver FROM {source} "
            f"WHERE {' AND '.join(sql for sql, _p in conds)} ORDER BY r.id{limit}) "
            f"SELECT h.id, h.scope, (SELECT coalesce(array_agg(t.tag ORDER BY t.tag), '{{}}') FROM mnemo_tags t "
            f"WHERE t.id = h.id), {_VERSION_COLUMNS}, {loaded} FROM h CROSS JOIN LATERAL "
            "(SELECT * FROM mnemo_versions w WHERE w.id = h.id OFFSET 0) v ORDER BY h.id, v.ver",
            params, conn, binary=True,
        )
        out: list[Found] = []
        misses: list[str] = []
        for rec, versions in self._group(rows, with_payloads=True):
            if rec.id in overlay:
                continue
            if not check_tags:
                out.append(self._found(rec, versions, "latest" if payloads else "none", batch))
                continue
            if payloads:
                packed = self._checked(rec, rec.latest, *versions[-1], batch)
                tags = _put_tags(packed)
            else:
                tags = self._summary_tags(rec, *versions[-1])
            if tags is not None and tags != rec.tags and set(tags) != set(rec.tags):
                rec = rec._replace(tags=tags)
                if not query.matches(tags):
                    misses.append(rec.id)
                    continue
            out.append(Found(rec, (packed,)) if payloads else Found(rec))
        if overlay:
            assert batch is not None
            extra = [
                self._overlay_found(r, "latest" if payloads else "none", batch, conn)
                for r in batch.matching(query, scopes.admits)
            ]
            out = sorted(out + extra, key=lambda f: f.rec.id)
            if query.limit is not None:
                del out[query.limit :]
        return out, misses

    def counts(self, scopes: ScopeFilter) -> tuple[int, int, int]:
        batch = self.current_batch()
        if batch is not None and batch.recs:
            # the tags as mnemo_tags holds them: counting reads no payload
            visible = [f.rec for f in self._select(Query(), scopes, False, [], check_tags=False)[0]]
            return len(visible), sum(len(r.versions) for r in visible), len({t for r in visible for t in r.tags})
        where, params = _scope_sql(scopes)
        rows = self._fetch(
            f"SELECT (SELECT count(*) FROM mnemo_records r WHERE {where}), "
            f"(SELECT count(*) FROM mnemo_versions v JOIN mnemo_records r ON r.id = v.id WHERE {where}), "
            f"(SELECT count(DISTINCT t.tag) FROM mnemo_tags t JOIN mnemo_records r ON r.id = t.id WHERE {where})",
            params * 3, self._batch_conn(),
        )
        records, versions, tags = rows[0]
        return int(records), int(versions), int(tags)

    def usage(self, scope: str, tag: str) -> Usage:
        batch = self.current_batch()
        overlay = batch.recs if batch is not None else {}
        rows = self._fetch(
            "SELECT r.id, r.ver, v.ver, v.size FROM mnemo_records r JOIN mnemo_tags t ON t.id = r.id AND t.tag = %s "
            "JOIN mnemo_versions v ON v.id = r.id WHERE r.scope = %s", [tag, scope], self._batch_conn(),
        )
        records: dict[str, list[tuple[int, int]]] = {}
        latest: dict[str, int] = {}
        for rec_id, rver, vver, size in rows:
            if rec_id in overlay:
                continue
            records.setdefault(rec_id, []).append((vver, size))
            latest[rec_id] = rver
        for rec in batch.matching(Query((tag,)), scope.__eq__) if batch is not None else ():
            records[rec.id] = [(v.ver, v.size) for v in rec.versions]
            latest[rec.id] = rec.latest.ver
        live = sum(size for rec_id, vs in records.items() for ver, size in vs if ver == latest[rec_id])
        return Usage(len(records), live, sum(map(len, records.values())),
                     sum(size for vs in records.values() for _v, size in vs))

    # -- the contract: the chain ---------------------------------------------------------------------
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
        self, pubkey: bytes | None, expect_head: tuple[int, str] | None, progress: Progress | None = None
    ) -> VerifyReport:
        return verify_postgres(self, pubkey, expect_head, progress)

    def compact(self) -> dict[str, int]:
        """VACUUM FULL the tables that held erased bytes (payloads and tags, with their TOAST tables and
        indexes): each is rewritten into new files and the old ones are removed, so that no file of the
        database keeps the bytes of a forgotten record's dead rows. Needs the tables' owner."""
        if self.current_batch() is not None:
            raise MnemoError("compact() cannot run inside a transaction")
        self.check_writable()
        size = "SELECT coalesce(sum(pg_total_relation_size(to_regclass(t))), 0) FROM unnest(%s::text[]) t"
        tables = ["mnemo_payloads", "mnemo_tags", "mnemo_versions", "mnemo_records"]
        owned = self._fetch(
            "SELECT bool_and(pg_has_role(current_user, c.relowner, 'USAGE')) FROM pg_class c "
            "WHERE c.oid = ANY(ARRAY[to_regclass('mnemo_payloads'), to_regclass('mnemo_tags')])"
        )
        if not (owned and owned[0][0]):
            # VACUUM would skip the tables with a warning only: the erased bytes would stay in their files
            raise StorageError(
                f"compacting {self.path} rewrites its tables (VACUUM FULL), which only their owner may do: "
                "run it with the owner's connection (see docs/POSTGRES.md)"
            )
        # A writer, as on the file: this process's writer lock and the head row are held throughout (on
        # the writer's connection: VACUUM cannot run inside a transaction), so that every commit is
        # either wholly before the compaction or after it.
        self._hold_writer_lock()
        try:
            # The rewrite keeps every row an open snapshot may still see: first wait (lock_timeout at
            # most) for those older than now, so that the erased rows are dead to all (horizon.py).
            own = [c.info.backend_pid for c in (self._read, self._write, self._sync) if c is not None and not c.closed]
            xid = horizon.horizon(self._fetch)
            horizon.wait_for_older(self._fetch, xid, own, self.lock_timeout, self.path)
            writer = self._begin(transactional=False).base
            try:
                before = int(self._fetch(size, [tables])[0][0])
                with self._read_lock:
                    conn = self._reads()
                    conn.execute(self._lock_timeout_setting)
                    try:
                        for table in tables[:2]:
                            try:
                                conn.execute(f"VACUUM (FULL) {table}")
                            except pg_errors.LockNotAvailable:
                                raise horizon.held(self._fetch, table, self.lock_timeout, self.path) from None
                    finally:  # the read connection's later reads wait as long as they always did
                        with contextlib.suppress(psycopg.Error):
                            conn.execute("RESET lock_timeout")
                after = int(self._fetch(size, [tables])[0][0])
            except psycopg.Error as exc:
                raise storage_error(exc, self.path) from None
            finally:
                assert isinstance(writer, _View) and writer.conn is not None
                with contextlib.suppress(psycopg.Error):
                    writer.conn.rollback()
        finally:
            self._mutex.release()
        return {"bytes_before": before, "bytes_after": after, "reclaimed": before - after}

    def persist(self) -> None:
        """The tables are the index; what is saved is the tree's compact range (mnemo_tree)."""
        self._save_tree()

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

    # -- writing -------------------------------------------------------------------------------------
    def writing(self, transactional: bool = False, blind: bool = False) -> _Writing:
        return _Writing(self, transactional, blind)

    def _writer(self) -> psycopg.Connection[Any]:
        """The writer's connection. Its session settings are made once: how long to wait for the head
        row, and commits that release it as soon as their record is written (the flush comes after, in
        _flush: see the module docstring)."""
        if self._write is None or self._write.broken or self._write.closed:
            if self._write is not None:
                with contextlib.suppress(psycopg.Error):
                    self._write.close()
            conn = self._connect(autocommit=True)
            try:
                conn.execute(self._lock_timeout_setting)
                conn.execute("SET synchronous_commit = off")
            except psycopg.Error as exc:
                conn.close()
                raise storage_error(exc, self.path) from None
            conn.autocommit = False
            self._write = conn
        return self._write

    def _begin(self, transactional: bool) -> Batch:
        """Start the writer's transaction and lock the head row: from here to the commit, this is the
        only writer of the database. A connection found lost here (the server restarted, or killed it
        while idle) is replaced once: nothing was done on it yet."""
        try:
            return self._begin_on(self._writer(), transactional)
        except StorageError:
            if self._write is None or not self._write.broken:
                raise
        self._write = None
        return self._begin_on(self._writer(), transactional)

    def _begin_on(self, conn: psycopg.Connection[Any], transactional: bool) -> Batch:
        try:
            with conn.pipeline():  # the BEGIN and the lock in one round trip
                cur = conn.execute("SELECT seq, hash, ts_ns, acl_seq FROM mnemo_head FOR UPDATE")
            row = cur.fetchone()
            if row is None:
                raise IntegrityError(f"{self.path}: mnemo_head holds no row")
            self._absorb_head(row, conn)
        except BaseException as exc:
            with contextlib.suppress(psycopg.Error):
                conn.rollback()
            if isinstance(exc, psycopg.Error):
                raise storage_error(exc, self.path) from None
            raise
        return Batch(_View(self, conn, self._acl, self._acl_upto), self._head, transactional)

    def _blind(self) -> Batch:
        """A batch built on the head this store last saw, without the head row: see _append."""
        return Batch(_View(self, None, self._acl, self._acl_upto), self._head, False)

    def _lock_blind(self, batch: Batch) -> None:
        """A blind batch that reads state after all: take the head row now, and build what it staged
        again on the head found (its entries are new records' puts, valid on any head)."""
        view = batch.base
        assert isinstance(view, _View)
        locked = self._begin(transactional=False)
        assert isinstance(locked.base, _View)
        view.conn, view._acl, view.acl_seq = locked.base.conn, locked.base._acl, locked.base.acl_seq
        self._restage(batch, (locked.head_seq, locked.head_hash, locked.head_ts))

    def _restage(self, batch: Batch, head: tuple[int, bytes, int]) -> None:
        """Build the batch's entries again on `head` (new seqs, prev and times; the same ops, agents,
        bodies and payloads)."""
        staged = batch.staged
        batch.staged = []
        batch.head_seq, batch.head_hash, batch.head_ts = head
        for s in staged:
            batch.stage(s.entry.op, s.entry.agent, s.entry.body, s.payload, s.tags, trusted=True)

    def _append(self, batch: Batch) -> int:
        """Commit a blind batch (only new records' puts, whose validity depends on nothing but the ACL)
        without having held the head row while it was built: mnemo_put builds its entries on the head it
        finds, in one call, if the last ACL entry is still the one the batch's checks used (else they are
        checked again on the newer ACL, and it is tried again). The row is locked only for the length of
        the call, which also waits for the flush when durability is "fsync". Returns the commit number."""
        view = batch.base
        assert isinstance(view, _View)
        # Alone, the call waits for its own flush (one round trip); with other threads of this process
        # writing, it commits without waiting and they all share the next flush (_flush).
        sync = self.durability == "fsync" and self._writing <= 1
        for _attempt in range(8):
            if view.conn is not None:
                break  # the batch read state after all, and holds the head row: it commits as any other
            conn = self._writer()
            try:
                conn.autocommit = True
                row = conn.execute(_PUT, [view.acl_seq, sync, *_put_columns(batch)]).fetchone()
            except psycopg.Error as exc:
                if not conn.broken:
                    raise storage_error(exc, self.path) from None
                # The connection went with the call in flight: did it land? If not, trying it again (on a
                # new connection) is safe. If it did, its flush is not known to have happened: wait for one.
                if not self._landed(batch):
                    continue
                return self._ticket()
            finally:
                if self._write is not None and not self._write.closed:
                    with contextlib.suppress(psycopg.Error):
                        self._write.autocommit = False
            assert row is not None
            applied, seq, head, ts, acl_seq, times, hashes = row
            if applied:
                self._built(batch, (seq, bytes(head), ts), times, hashes)
                ticket = self._ticket()
                if sync:  # the call's flush covered every commit numbered before it
                    with self._flush_lock:
                        self._flushed = max(self._flushed, ticket)
                return ticket
            self._load_acl(acl_seq, None)
            view._acl, view.acl_seq = self._acl, acl_seq
            self._check_puts(batch)
        if view.conn is None:
            self._lock_blind(batch)
            self._check_puts(batch)
        return self._commit(batch)

    def _check_puts(self, batch: Batch) -> None:
        view = batch.base
        assert isinstance(view, _View)
        for s in batch.staged:
            if not view._acl.allows(s.entry.agent, "write", s.entry.body["scope"]):
                raise PermissionDenied(f"{s.entry.agent} may not write in scope {s.entry.body['scope']}")

    def _built(self, batch: Batch, head: tuple[int, bytes, int], times: list[int], hashes: list[Any]) -> None:
        """The batch's entries as mnemo_put built them on `head`: rebuilt here with its times, each
        checked against the hash the server computed (the same bytes as the log file's, or an error)."""
        seq, prev, _ts = head
        staged = []
        for s, ts, server_hash in zip(batch.staged, times, hashes, strict=True):
            e = s.entry
            seq += 1
            entry = make_entry(seq, ts, prev, e.op, e.agent, e.body, trusted=True)
            if entry.hash != bytes(server_hash):
                raise IntegrityError(f"{self.path}: the server built entry {seq} with other bytes than Mnemo's "
                                     "encoding makes (mnemo_put disagrees with codec.make_entry)")
            staged.append(s._replace(entry=entry))
            prev = entry.hash
        batch.staged = staged
        batch.head_seq, batch.head_hash, batch.head_ts = seq, prev, staged[-1].entry.ts_ns
        self._head = (batch.head_seq, batch.head_hash, batch.head_ts)

    def _landed(self, batch: Batch) -> bool:
        """Whether the puts of a blind batch whose call was cut off are in the chain (all of them or none:
        one transaction), asked on a fresh connection once no writer holds the head row; if they are,
        the batch's entries become those stored."""
        ids = [s.entry.body["id"] for s in batch.staged]
        self._write = None
        conn = self._writer()
        try:
            conn.execute("SELECT 1 FROM mnemo_head FOR UPDATE")
            rows = conn.execute("SELECT e.seq, e.raw FROM mnemo_versions v JOIN mnemo_entries e ON e.seq = v.seq "
                                "WHERE v.id = ANY(%s::text[]) AND v.ver = 1 ORDER BY e.seq", [ids]).fetchall()
        except psycopg.Error as exc:
            raise storage_error(exc, self.path) from None
        finally:
            with contextlib.suppress(psycopg.Error):
                conn.rollback()
        if not rows:
            return False
        stored = [decode_entry(bytes(raw)) for _seq, raw in rows]
        if [e.body for e in stored] != [s.entry.body for s in batch.staged]:
            raise IntegrityError(f"{self.path}: the entries of records {ids} are not the puts that made them")
        batch.staged = [s._replace(entry=e) for s, e in zip(batch.staged, stored, strict=True)]
        last = stored[-1]
        batch.head_seq, batch.head_hash, batch.head_ts = last.seq, last.hash, last.ts_ns
        self._head = (last.seq, last.hash, last.ts_ns)
        return True

    def _commit(self, batch: Batch) -> int:
        """Write the batch's entries and what they change of the derived tables, and commit (without
        waiting for the flush; see the module docstring). Returns this process's commit number."""
        conn = self._write
        assert conn is not None and isinstance(batch.base, _View)
        staged = batch.staged
        view = batch.base
        # Replay the batch onto the committed state, to learn what each record ends as. Records a put
        # makes (version 1) need no look-up: the insert refuses an id that exists.
        ids = {s.entry.body["id"] for s in staged if s.entry.op == "put" and s.entry.body["ver"] > 1}
        ids.update(i for s in staged if s.entry.op == "forget" for i in s.entry.body["ids"])
        view.prefetch(sorted(ids))
        for s in staged:
            if s.entry.op == "put" and s.entry.body["ver"] == 1:
                view.known.setdefault(s.entry.body["id"], None)
        final = Batch(view, (-1, ZERO_HASH, 0), True)
        forgotten: list[str] = []
        for s in staged:
            e = s.entry
            apply_entry(final, e, e.seq, 0 if s.payload is None else len(s.payload), s.tags, e.seq)
            if e.op == "forget":
                forgotten.extend(e.body["ids"])
        first = staged[0].entry.seq
        live_seqs = {v.seq for r in final.recs.values() if r is not None for v in r.versions}
        payloads = [
            (s.entry.seq, s.payload) for s in staged
            if s.payload is not None and (s.entry.op != "put" or s.entry.seq in live_seqs)
        ]
        # Committed records this batch forgets (or forgets and puts again): their rows and payloads go.
        stale = [
            rec_id for rec_id, r in final.recs.items()
            if view.known.get(rec_id) is not None and (r is None or r.versions[0].seq >= first)
        ]
        new_recs: list[tuple[str, str, int]] = []
        upserts: list[tuple[str, str, int]] = []
        versions: list[Version] = []
        version_ids: list[str] = []
        tag_rows: list[tuple[str, str]] = []
        retag: list[str] = []
        for rec_id, rec in final.recs.items():
            if rec is None:
                continue
            before = None if rec_id in stale else view.known.get(rec_id)
            (upserts if before is not None else new_recs).append((rec_id, rec.scope, rec.latest.ver))
            fresh = [v for v in rec.versions if v.seq >= first]
            versions.extend(fresh)
            version_ids.extend([rec_id] * len(fresh))
            if before is None or before.tags != rec.tags:
                if before is not None:
                    retag.append(rec_id)
                tag_rows.extend((tag, rec_id) for tag in rec.tags)
        acl_seqs = [s.entry.seq for s in staged if s.entry.op in ACL_OPS]
        last = staged[-1].entry
        columns = (
            [s.entry.seq for s in staged], [s.entry.op for s in staged], [s.entry.raw for s in staged],
            [s.entry.hash for s in staged],
            [p[0] for p in payloads], [p[1] for p in payloads],
            stale, forgotten,
            [r[0] for r in new_recs], [r[1] for r in new_recs], [r[2] for r in new_recs],
            [r[0] for r in upserts], [r[1] for r in upserts], [r[2] for r in upserts],
            version_ids, [v.ver for v in versions], [v.seq for v in versions], [v.ts_ns for v in versions],
            [v.agent for v in versions], [v.size for v in versions], [v.hash for v in versions],
            [v.entry_len for v in versions], [v.slot_len for v in versions],
            retag, [t[0] for t in tag_rows], [t[1] for t in tag_rows],
            last.seq, last.hash, batch.head_ts, max(acl_seqs, default=-1),
        )
        size = sum(len(s.entry.raw) + len(s.payload or b"") for s in staged) + sum(len(t[0]) for t in tag_rows)
        try:
            # the rows and the COMMIT in one round trip, unless they are too large for a pipeline
            with conn.pipeline() if size <= PIPELINE_MAX_BYTES else contextlib.nullcontext():
                conn.execute(_COMMIT, columns)
                conn.commit()
        except psycopg.OperationalError as exc:
            if not conn.broken:
                with contextlib.suppress(psycopg.Error):
                    conn.rollback()
                raise storage_error(exc, self.path) from None
            # The commit was sent and the connection went: did it land? Ask, once the head row is free.
            if not self._committed(staged[0].entry):
                raise StorageError(
                    f"the connection to {self.path} was lost while committing ({_first_line(exc)}); the commit did "
                    "not land and nothing was written: it is safe to retry"
                ) from None
        except psycopg.Error as exc:  # refused (the rows, or the commit): nothing was written
            with contextlib.suppress(psycopg.Error):
                conn.rollback()
            raise storage_error(exc, self.path) from None
        self._head = (last.seq, last.hash, batch.head_ts)
        if acl_seqs:
            self._acl, self._acl_upto = final.acl, max(acl_seqs)
        return self._ticket()

    def _ticket(self) -> int:
        """The number of the commit just made, for _flush."""
        with self._ticket_lock:
            self._commits += 1
            return self._commits

    def _committed(self, first: Entry) -> bool:
        """Whether the entry `first` is in the chain, asked on a fresh connection once no writer holds
        the head row (so a transaction still in flight has finished, one way or the other)."""
        self._write = None
        conn = self._writer()
        try:
            conn.execute("SELECT 1 FROM mnemo_head FOR UPDATE")
            row = conn.execute("SELECT hash FROM mnemo_entries WHERE seq = %s", [first.seq]).fetchone()
        except psycopg.Error as exc:
            raise storage_error(exc, self.path) from None
        finally:
            with contextlib.suppress(psycopg.Error):
                conn.rollback()
        return row is not None and bytes(row[0]) == first.hash

    def _flush(self, ticket: int) -> None:
        """Return once commit number `ticket` of this process is durable: commit, with
        synchronous_commit = on, a transaction that writes only its own commit record; its flush covers
        every commit before it. Threads waiting here meanwhile share one flush, and so do the writes
        other threads have in progress: the flush waits for them (FLUSH_WAIT at most), as commits are
        made one at a time and each takes about as long as a flush."""
        with self._flush_lock:
            if self._flushed >= ticket:
                return
            deadline = time.monotonic() + FLUSH_WAIT
            with self._writes:
                while self._writing and (left := deadline - time.monotonic()) > 0:
                    self._writes.wait(left)
            with self._ticket_lock:
                target = self._commits
            for attempt in (0, 1):  # a connection found lost (killed while idle) is replaced once
                try:
                    if self._sync is None or self._sync.broken or self._sync.closed:
                        self._sync = self._connect(autocommit=True)
                        self._sync.execute("SET synchronous_commit = on")
                    self._sync.execute("SELECT pg_current_xact_id()")
                    break
                except psycopg.Error as exc:
                    if attempt == 0 and self._sync is not None and self._sync.broken:
                        continue
                    self._failed = exc
                    raise DurabilityError(
                        f"could not make a commit durable on {self.path}: {_first_line(exc)}"
                    ) from None
            self._flushed = max(self._flushed, target)

    def _write_starts(self) -> None:
        with self._writes:
            self._writing += 1

    def _write_ends(self) -> None:
        with self._writes:
            self._writing -= 1
            self._writes.notify_all()

    def _batch_flusher(self) -> None:
        while not self._stop.wait(BATCH_INTERVAL):
            if self._flushed < self._commits and self._failed is None:
                with contextlib.suppress(MnemoError):
                    self._flush(self._commits)

    # -- closing ---------------------------------------------------------------------------------------
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

    def _close_connections(self) -> None:
        for conn in (self._read, self._write, self._sync):
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    conn.close()


class _Writing:
    """PostgresStore.writing's context: the writer's transaction, the head row locked, one Batch; or,
    for a blind batch, a Batch built on the last head seen and appended in one call (_append)."""

    __slots__ = ("store", "transactional", "blind", "batch")

    def __init__(self, store: PostgresStore, transactional: bool, blind: bool) -> None:
        self.store = store
        self.transactional = transactional
        self.blind = blind and not transactional
        self.batch: Batch | None = None

    def __enter__(self) -> Batch:
        store = self.store
        outer = store.current_batch()
        if outer is not None:
            return outer
        store.check_writable()
        store._write_starts()
        try:
            store._hold_writer_lock()
            try:
                batch = store._blind() if self.blind else store._begin(self.transactional)
            except BaseException:
                store._mutex.release()
                raise
        except BaseException:
            store._write_ends()
            raise
        store._local.batch = self.batch = batch
        return batch

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        batch = self.batch
        if batch is None:
            return
        store = self.store
        store._local.batch = None
        ticket = 0
        try:
            if exc_type is None and batch.staged:
                view = batch.base
                assert isinstance(view, _View)
                ticket = store._append(batch) if view.conn is None else store._commit(batch)
            elif store._write is not None:
                with contextlib.suppress(psycopg.Error):
                    store._write.rollback()
        finally:
            store._mutex.release()
            store._write_ends()
        if ticket and store.durability == "fsync":
            store._flush(ticket)


def _put_columns(batch: Batch) -> list[Any]:
    """mnemo_put's arrays for a blind batch: each put's time, packed op, agent and body, payload, and
    the rows of its record."""
    staged = batch.staged
    assert all(s.entry.op == "put" and s.entry.body["ver"] == 1 and s.payload is not None for s in staged), \
        "a blind batch holds new records' puts"
    bodies = [s.entry.body for s in staged]
    return [
        [s.entry.ts_ns for s in staged],
        [pack_canonical(s.entry.op) + pack_canonical(s.entry.agent) + pack_canonical(s.entry.body) for s in staged],
        [s.payload for s in staged],
        [b["id"] for b in bodies], [b["scope"] for b in bodies], [s.entry.agent for s in staged],
        [b["size"] for b in bodies],
        [tag for s in staged for tag in s.tags], [k for k, s in enumerate(staged, 1) for _tag in s.tags],
    ]


def open_postgres(
    dsn: str, agent: str, *, readonly: bool = False, durability: str = "fsync", lock_timeout: float = 10.0
) -> PostgresStore:
    return PostgresStore(dsn, agent, readonly=readonly, durability=durability, lock_timeout=lock_timeout)


def grant_application_role(dsn: str, role: str) -> None:
    """Give `role` exactly what an application needs of the Mnemo database in the first schema of
    `dsn`'s search_path (schema.APPLICATION_PRIVILEGES): append entries, erase payloads (in a forget's
    transaction only), keep the derived tables. Run it as the tables' owner. The role can then neither
    update nor delete an entry, nor disable a trigger or alter a table; compaction (VACUUM FULL) and
    schema migrations stay the owner's."""
    from psycopg import sql

    name = display_name(dsn)
    dsn_params(dsn)
    try:
        with psycopg.connect(dsn, autocommit=False, connect_timeout=10) as conn:
            row = conn.execute("SELECT current_schema()").fetchone()
            if row is None or row[0] is None:
                raise StorageError(f"{name}: the first schema of the search_path does not exist")
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(row[0]), sql.Identifier(role)))
            for table, privileges in schema.APPLICATION_PRIVILEGES.items():
                conn.execute(sql.SQL("GRANT {} ON {} TO {}").format(
                    sql.SQL(privileges), sql.Identifier(table), sql.Identifier(role)))
            conn.commit()
    except psycopg.Error as exc:
        raise storage_error(exc, name) from None


def application_dsn(dsn: str, user: str, password: str | None = None) -> str:
    """The DSN of `dsn` for another role (tests, and docs/POSTGRES.md's role layout)."""
    params = conninfo_to_dict(dsn)
    params["user"] = user
    if password is None:
        params.pop("password", None)
    else:
        params["password"] = password
    return make_conninfo("", **params)


__all__ = [
    "PostgresStore", "application_dsn", "display_name", "grant_application_role", "open_postgres", "storage_error",
]
