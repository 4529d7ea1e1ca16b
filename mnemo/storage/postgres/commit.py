"""Writing to a PostgreSQL store: the writer's transaction, its two commit paths and the flush that makes
them durable.

One order: every writer locks the single `mnemo_head` row `FOR UPDATE` inside the transaction that
commits its entries, and holds it from the reads of a read-modify-write to the commit, so seqs are
gap-free and each entry links to the one before, whatever process or host wrote it. A blind batch (new
records' puts only) is the exception: built without the row, it is appended by one call that takes the
row and builds its entries on the head it finds (_append); any other commits by mnemo_commit (_commit).

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
import threading
import time
from typing import Any

import psycopg

from ...acl import Acl
from ...chain.codec import SALT_SIZE, ZERO_HASH, Entry, decode_entry, make_entry, pack_canonical
from ...errors import DurabilityError, IntegrityError, PermissionDenied, StorageError
from ...recall._numpy import np
from ...recall.embedding import Embedder, embed
from ..batch import ACL_OPS, Batch, apply_entry
from ..recall import searchable_text
from ..types import Rec, Version
from ..writer import WriterContext
from .errors import first_line, storage_error
from .session import Session
from .sql import COMMIT_CALL, PUT_CALL, TAGS, TEXT_CALL, VERSION_COLUMNS, VERSIONS, group_rows
from .text_index import doc_of
from .text_rows import TextRows, put_text_columns
from .vectors import INSERT_COMMITTED, packed

# A commit whose rows come to more than this is sent outside a pipeline (one round trip more, nothing
# next to its size): psycopg 3.3's pipeline mode stops sending a query of several MB part way and then
# waits for its result for ever, the server waiting for the rest (psycopg 3.3.9: 16 records of 900 kB hang,
# 12 do not; test_store_basic.py's test_a_transaction_of_many_megabytes_commits_whole commits 20).
PIPELINE_MAX_BYTES = 1 << 20
FLUSH_WAIT = 0.005  # how long a flush may wait for this process's writes in progress, to cover them too


class BatchView:
    """What a batch reads through to: the committed state, on the writer's connection, under the lock."""

    def __init__(self, store: Commits, conn: psycopg.Connection[Any] | None, acl: Acl,
                 acl_seq: int = -1) -> None:
        self.store = store
        self.conn = conn  # None: a blind batch, built without the head row (see _append)
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


class Commits(Session):
    """The writes of a PostgresStore (its base, below the reads): each batch in the writer's transaction,
    committed by one of the two paths and flushed."""

    embedder: Embedder | None = None  # set at open (meaning.py): a commit writes its documents' vectors

    def __init__(self, dsn: str, agent: str, *, readonly: bool, durability: str, lock_timeout: float) -> None:
        super().__init__(dsn, agent, readonly=readonly, durability=durability, lock_timeout=lock_timeout)
        self._flush_lock = threading.Lock()  # held while flushing: waiters meanwhile share the next flush
        self._ticket_lock = threading.Lock()  # numbers commits; never held while flushing, so that
        self._commits = 0  # commits go on during a flush (this process's commits so far)
        self._writes = threading.Condition(threading.Lock())  # notified as each write in progress ends
        self._writing = 0  # threads of this process between writing()'s start and their commit
        self._flushed = 0

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
        return Batch(BatchView(self, conn, self._acl, self._acl_upto), self._head, transactional)

    def _blind(self) -> Batch:
        """A batch built on the head this store last saw, without the head row: see _append."""
        return Batch(BatchView(self, None, self._acl, self._acl_upto), self._head, False)

    def _lock_blind(self, batch: Batch) -> None:
        """A blind batch that reads state after all: take the head row now, and build what it staged
        again on the head found (its entries are new records' puts, valid on any head)."""
        view = batch.base
        assert isinstance(view, BatchView)
        locked = self._begin(transactional=False)
        assert isinstance(locked.base, BatchView)
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
        assert isinstance(view, BatchView)
        # Alone, the call waits for its own flush (one round trip); with other threads of this process
        # writing, it commits without waiting and they all share the next flush (_flush).
        sync = self.durability == "fsync" and self._writing <= 1
        # the puts' text index rows, computed once: a put built again on another head has the same payload
        text: list[Any] | None = None
        # (with an embedder, puts are committed under the head row as any other batch: their vectors go
        # in the same transaction, and mnemo_put commits inside its own call)
        for _attempt in range(0 if self.embedder is not None else 8):
            if view.conn is not None:
                break  # the batch read state after all, and holds the head row: it commits as any other
            if text is None:
                text = put_text_columns(s.payload or b"" for s in batch.staged)
            conn = self._writer()
            try:
                conn.autocommit = True
                row = conn.execute(PUT_CALL, [view.acl_seq, sync, *_put_columns(batch), *text]).fetchone()
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
        ready: dict[str, Any] = {}
        if view.conn is None:
            if self.embedder is not None:  # the vectors made before the head row is taken: no writer waits on them
                ready = self._embedded_puts(batch)
            self._lock_blind(batch)
            self._check_puts(batch)
        return self._commit(batch, ready)

    def _embedded_puts(self, batch: Batch) -> dict[str, Any]:
        """The unit vector of each staged put's text, by that exact text (so that the commit takes each for
        the very text it writes, and embeds any other there)."""
        assert self.embedder is not None
        texts = [searchable_text(s.payload[SALT_SIZE:]) or "" for s in batch.staged
                 if s.payload is not None and doc_of(s.payload[SALT_SIZE:]) is not None]
        unique = list(dict.fromkeys(texts))
        return dict(zip(unique, embed(self.embedder, unique), strict=True)) if unique else {}

    def _check_puts(self, batch: Batch) -> None:
        view = batch.base
        assert isinstance(view, BatchView)
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
        rows = self._once_no_writer("SELECT e.seq, e.raw FROM mnemo_versions v JOIN mnemo_entries e ON e.seq = v.seq "
                                    "WHERE v.id = ANY(%s::text[]) AND v.ver = 1 ORDER BY e.seq", [ids])
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

    def _commit(self, batch: Batch, ready: dict[str, Any] | None = None) -> int:
        """Write the batch's entries and what they change of the derived tables, and commit (without
        waiting for the flush; see the module docstring). `ready`: vectors made before the head row was
        taken, by the exact text they were made from. Returns this process's commit number."""
        conn = self._write
        assert conn is not None and isinstance(batch.base, BatchView)
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
        # The text index: the documents of the committed records it changes leave (with the terms of any
        # of their versions), and the latest version of each record it leaves live comes in, if its
        # content is text (the payload is in hand).
        committed = [r for r in map(view.known.get, final.recs) if r is not None]
        text = TextRows()
        texts: list[str] = []
        staged_payloads = {s.entry.seq: s.payload for s in staged if s.entry.op == "put"}
        for rec_id, rec in final.recs.items():
            payload = None if rec is None else staged_payloads.get(rec.latest.seq)
            doc = None if payload is None else doc_of(payload[SALT_SIZE:])
            if doc is not None:
                assert rec is not None and payload is not None
                text.add(rec.latest.seq, rec_id, rec.scope, doc)
                texts.append(searchable_text(payload[SALT_SIZE:]) or "")
        # The documents' vectors, with the embedder (vectors.py), in the same transaction: made before
        # anything is sent, so that an embedder that fails leaves nothing written.
        vectors: list[Any] | None = None
        if self.embedder is not None and texts:
            try:
                made = ready or {}
                missing = [t for t in dict.fromkeys(texts) if t not in made]
                if missing:
                    made = {**made, **dict(zip(missing, embed(self.embedder, missing), strict=True))}
                vectors = [text.seqs, text.scopes, packed(np.stack([made[t] for t in texts]))]
            except BaseException:
                with contextlib.suppress(psycopg.Error):
                    conn.rollback()
                raise
        size = sum(len(s.entry.raw) + len(s.payload or b"") for s in staged) + sum(len(t[0]) for t in tag_rows)
        size += text.size
        try:
            # the rows and the COMMIT in one round trip, unless they are too large for a pipeline
            with conn.pipeline() if size <= PIPELINE_MAX_BYTES else contextlib.nullcontext():
                conn.execute(COMMIT_CALL, columns)
                if committed or text.ids:
                    conn.execute(TEXT_CALL, text.columns([r.id for r in committed],
                                                         [v.seq for r in committed for v in r.versions]))
                if vectors is not None:
                    conn.execute(INSERT_COMMITTED, vectors)
                conn.commit()
        except psycopg.OperationalError as exc:
            if not conn.broken:
                with contextlib.suppress(psycopg.Error):
                    conn.rollback()
                raise storage_error(exc, self.path) from None
            # The commit was sent and the connection went: did it land? Ask, once the head row is free.
            if not self._committed(staged[0].entry):
                raise StorageError(
                    f"the connection to {self.path} was lost while committing ({first_line(exc)}); the commit did "
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
        rows = self._once_no_writer("SELECT hash FROM mnemo_entries WHERE seq = %s", [first.seq])
        return bool(rows) and bytes(rows[0][0]) == first.hash

    def _once_no_writer(self, query: str, params: list[Any]) -> list[tuple[Any, ...]]:
        """The rows of `query`, read on a fresh writer's connection once no writer holds the head row: a
        transaction whose connection was lost in flight has then finished, one way or the other, and what
        it left is there to see. The head row is released at once after."""
        self._write = None
        conn = self._writer()
        try:
            conn.execute("SELECT 1 FROM mnemo_head FOR UPDATE")
            return conn.execute(query, params).fetchall()
        except psycopg.Error as exc:
            raise storage_error(exc, self.path) from None
        finally:
            with contextlib.suppress(psycopg.Error):
                conn.rollback()

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
                        f"could not make a commit durable on {self.path}: {first_line(exc)}"
                    ) from None
            self._flushed = max(self._flushed, target)

    def _write_starts(self) -> None:
        with self._writes:
            self._writing += 1

    def _write_ends(self) -> None:
        with self._writes:
            self._writing -= 1
            self._writes.notify_all()

    # -- what a batch reads through to -----------------------------------------------------------------
    def _batch_conn(self) -> psycopg.Connection[Any] | None:
        """The connection reads of this thread's batch go through: the writer's, in its transaction. A
        blind batch that turns out to read takes the head row first, as any other would have."""
        batch = self.current_batch()
        if batch is None:
            return None
        view = batch.base
        assert isinstance(view, BatchView)
        if view.conn is None:
            self._lock_blind(batch)
        return self._write

    def _recs(self, conn: psycopg.Connection[Any] | None, ids: list[str]) -> dict[str, Rec]:
        """The committed records with these ids, whoever may read them."""
        rows = self._fetch(
            f"SELECT r.id, r.scope, {TAGS}, {VERSION_COLUMNS} FROM mnemo_records r CROSS JOIN LATERAL {VERSIONS} "
            "WHERE r.id = ANY(%s::text[]) ORDER BY r.id, v.ver", [ids], conn,
        )
        return {rec.id: rec for rec, _p in group_rows(rows, with_payloads=False)}


class _Writing(WriterContext[Commits, int]):
    """PostgresStore.writing's context (mnemo/storage/writer.py): the writer's transaction, the head row
    locked, one Batch; or, for a blind batch, a Batch built on the last head seen and appended in one call
    (_append). The commit is made durable by _flush."""

    __slots__ = ("blind",)

    def __init__(self, store: Commits, transactional: bool, blind: bool) -> None:
        super().__init__(store, transactional)
        self.blind = blind and not transactional

    def _starts(self) -> None:
        self.store._write_starts()

    def _ends(self) -> None:
        self.store._write_ends()

    def _begin(self, deadline: float) -> Batch:
        """(The head row is waited for as long as the server's lock_timeout setting allows: `deadline`
        is not used.)"""
        return self.store._blind() if self.blind else self.store._begin(self.transactional)

    def _end(self, batch: Batch, commit: bool) -> int | None:
        """The commit's number for _flush, None if nothing was committed."""
        store = self.store
        if commit:
            view = batch.base
            assert isinstance(view, BatchView)
            return store._append(batch) if view.conn is None else store._commit(batch)
        if store._write is not None:
            with contextlib.suppress(psycopg.Error):
                store._write.rollback()
        return None

    def _durable(self, done: int) -> None:
        self.store._flush(done)


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


__all__ = ["FLUSH_WAIT", "PIPELINE_MAX_BYTES", "BatchView", "Commits"]
