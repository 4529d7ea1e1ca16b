"""The PostgreSQL backend: the same chain as the log file, in tables (the schema package), for agents on many
machines. Implements the storage contract (mnemo/storage/contract.py).

PostgresStore is built in three layers: session.py (its connections, and the head and ACL it has caught
up to), commit.py (the writes: one order, two commit paths, group commit), and here what it opens and
reads: the schema's creation and migration, state, records and queries, the chain, compaction, closing.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from itertools import repeat
from operator import attrgetter, contains
from typing import Any, cast

import psycopg
from psycopg import errors as pg_errors

from ..._native import pgread
from ...acl import Acl
from ...chain.codec import (
    ZERO_HASH,
    EntryDecodeError,
    decode_entry,
    decode_record_fields,
    make_entry,
    served_digest_problem,
    served_put_problem,
    unpackb,
)
from ...chain.tree import CompactRange
from ...errors import IntegrityError, MnemoError, NotFound, StorageError
from ...recall.embedding import Embedder
from ...recall.engine import Staged, search
from ...recall.query import Phrase
from ...recall.query import Query as RecallQuery
from ...record import MemoryRecord, VerifyReport
from ..batch import Batch
from ..recall import Hit, in_transaction, searchable_text
from ..types import BATCH_INTERVAL, Found, LogItem, Payloads, Progress, Query, Rec, ScopeFilter, Usage, Version
from . import horizon, schema
from .commit import PIPELINE_MAX_BYTES as PIPELINE_MAX_BYTES  # re-exported: tests size commits by it
from .commit import BatchView
from .dsn import application_dsn, display_name, grant_application_role
from .errors import storage_error
from .meaning import Meaning
from .schema import SCHEMA_LOCK
from .sql import (
    PREFETCH_POSTINGS,
    RECORD_ROW,
    group_rows,
    latest_records,
    latest_sql,
    recall_sql,
    records_of,
    records_sql,
    scope_sql,
    select_source,
    served_rows,
    usage_sql,
)
from .text_index import IndexDisagrees, TableSource
from .vectors import PRUNE
from .verify import verify_postgres

TREE_SAVE_EVERY = 1024  # entries between saved compact ranges of the tree
RECALL_READS = 8  # reads of the text index a recall makes at most while the records change under it
_tags_of = attrgetter("tags")  # a MemoryRecord's tags, in C

# Where the columns served_rows checks are in the rows of latest_sql: (id, scope, ver, hash, raw, payload)
SERVED_COLUMNS = (0, 1, 3, 8, 11, 12)
# served_rows and latest_records in C (mnemo/_pgread.c) when it is there, else their pure-Python twins (sql.py)
_served_rows: Callable[[list[Any], tuple[int, int, int, int, int, int]], list[bytes | None]] = (
    pgread.served_rows if pgread is not None else served_rows
)
_latest_records: Callable[[list[Any], tuple[int, ...], type], list[MemoryRecord | None]] = (
    pgread.latest_records if pgread is not None else latest_records
)


# The records a recall read, by the seq of the document it ranked (None: no record it may read has it)
Loaded = dict[int, "tuple[Rec, bytes] | None"]
PREFETCH_SLACK = 2  # documents read with the index beyond `limit`: the last bits of the server's scores may differ
PREFETCH_MAX = 100  # a recall of a greater limit reads its hits apart
POSTINGS_SEEN = 4096  # the terms whose numbers of postings a store keeps (all forgotten past it)
INDEX_COLUMNS = 10  # the columns of recall_sql's rows of the index; those of kind PREFETCHED, a record's after them
PREFETCHED = 5
PREFETCHED_SEQ = 4  # where the seq of a version is in the rows of kind PREFETCHED (latest_sql's, after INDEX_COLUMNS)
# The rows of the records recall_sql read with the index (latest_sql's), each record's by its versions' seqs
Prefetched = dict[int, list[Any]]


def _storable(text: str) -> bool:
    """Whether PostgreSQL's text can hold `text`: no NUL character and no unpaired surrogate (which UTF-8
    cannot encode). A record id that is not is no record's: asked for, it is missing, not a server error."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _id_and_version(row: Any) -> tuple[str, int]:
    return row[0], row[3]


class _Unserved(Exception):
    """A document recall ranked (named by its seq) that the chain does not bear out: no record the caller
    may read has it as its latest version (`changed`: a commit since the index was read, or a row of the
    index), or one has, and its content is not text matching the query or its tags do not match."""

    def __init__(self, seq: int, changed: bool) -> None:
        super().__init__(seq)
        self.seq, self.changed = seq, changed


def _put_tags(packed: bytes) -> tuple[str, ...] | None:
    """The tags in a put's packed fields, or None if they do not read as a list of strings (the client,
    which decodes the fields it is served, says what is wrong with them)."""
    try:
        return _str_tags(list(decode_record_fields(packed)[1]))
    except Exception:  # msgpack raises several unrelated types on garbage
        return None


def _str_tags(tags: Any) -> tuple[str, ...] | None:
    return tuple(tags) if type(tags) is list and all(type(tag) is str for tag in tags) else None


def _record_row(start: int) -> tuple[int, ...]:
    """RECORD_ROW in rows whose own columns start at `start` (_fetch_at)."""
    return RECORD_ROW if not start else tuple(column + start for column in RECORD_ROW)


def _tag_misses(query: Query, records: list[MemoryRecord]) -> list[str]:
    """The ids of the records whose tags are strings that `query` does not match (query.matches): those
    whose put does not hold the tags a mnemo_tags row made them candidates for. A record whose tags do not
    read as strings is kept, as select keeps it. For a query of tags only (the most common), each tag is
    looked for in every record's tags in one pass of C loops, and no record is looked at one by one
    unless one lacks it: equality, which for tags that are strings is what matches says."""
    if not (query.any_tags or query.any_prefixes or query.tag_prefix is not None):
        tag_sets = list(map(_tags_of, records))
        if all(all(map(contains, tag_sets, repeat(tag))) for tag in query.tags):
            return []
    return [record.id for record in records
            if all(type(tag) is str for tag in record.tags) and not query.matches(record.tags)]


def _select_from(query: Query, scopes: ScopeFilter, excluded: list[str]) -> tuple[str, str, list[Any], str]:
    """The FROM item of the records `r` a select of `query` reads, its WHERE condition (the scopes
    `scopes` admits, the query's tags, none of the ids `excluded`), their parameters and the LIMIT clause."""
    source, params, conds = select_source(query, scopes.only)
    where, scope_params = scope_sql(scopes)  # (r.scope = the exact scope, when there is one)
    conds.insert(0, (where, scope_params))
    if excluded:
        conds.append(("NOT (r.id = ANY(%s::text[]))", [excluded]))
    for _sql, cond_params in conds:
        params += cond_params
    limit = "" if query.limit is None else f" LIMIT {int(query.limit)}"
    return source, " AND ".join(sql for sql, _p in conds), params, limit


class PostgresStore(Meaning):
    """A Mnemo database in a PostgreSQL schema. Thread-safe; processes on any number of hosts may share it."""

    def __init__(
        self, dsn: str, agent: str, *, readonly: bool = False, durability: str = "fsync",
        lock_timeout: float = 10.0, create: bool = True, embedder: Embedder | None = None, reindex: bool = False,
    ) -> None:
        super().__init__(dsn, agent, readonly=readonly, durability=durability, lock_timeout=lock_timeout)
        self.recovery: list[str] = []
        self._tree: Any = None  # the CompactRange of the tree as far as this store has read (tree_head)
        self._tree_saved = 0
        self._tree_lock = threading.Lock()
        self._stop = threading.Event()
        self._batch_thread: threading.Thread | None = None
        # how many postings each term (a prefix: "prefix*") had at the last recall that read it
        self._postings_seen: dict[str, int] = {}
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

    # -- the contract: reads ---------------------------------------------------------------------------
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
        return self._get(rec_id, scopes, payloads, True)

    def _get(self, rec_id: str, scopes: ScopeFilter, payloads: Payloads, index_tags: bool) -> Found | None:
        """get, its Rec's tags left empty without `index_tags` (for a caller that takes them from the
        payload: mnemo_tags is not read)."""
        if not _storable(rec_id):
            return None  # never a stored id: missing, as on the file backend, with no round trip
        batch = self.current_batch()
        conn = self._batch_conn()
        if batch is not None and rec_id in batch.recs:
            rec = batch.recs[rec_id]
            if rec is None or not scopes.admits(rec.scope):
                return None
            return self._overlay_found(rec, payloads, batch, conn)
        where, params = scope_sql(scopes)
        # The scope filter is part of the query: a record the caller may not read comes back exactly
        # as a missing one does, from the same work.
        # Every row by its key (as in select: lookups the planner cannot turn into scans of the chain).
        columns = None if payloads == "none" else "c.raw, c.payload"
        rows = self._fetch(latest_sql("mnemo_records r", f"r.id = %s AND {where}", "", columns, payloads == "all",
                                      index_tags), [rec_id, *params], conn, binary=True)
        for rec, loaded in group_rows(rows, with_payloads=True):
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

    def get_record(
        self, rec_id: str, scopes: ScopeFilter, build: Callable[[Found], MemoryRecord]
    ) -> MemoryRecord | None:
        """get's latest version as a MemoryRecord: read, checked and built in one call (_latest_records);
        where that gives nothing (a check failed, fields it does not decode), or in a transaction, get's
        general path reads it again and `build` makes the record, or says what is wrong."""
        if not _storable(rec_id):
            return None
        if self.current_batch() is None:
            # The scope condition is computed for a missing id too (on an empty scope) and neither side
            # of the sum can cut the other short: with many scopes to compare, a condition left unasked
            # for a missing id made its get measurably faster than that of a record the caller may not read.
            where, params = scope_sql(scopes, "COALESCE(r.scope, '')")
            source = "(SELECT %s::text AS id) q LEFT JOIN mnemo_records r ON r.id = q.id"
            admitted = f"(({where})::int + (r.id IS NOT NULL)::int) = 2"
            rows, start = self._fetch_at(records_sql(source, admitted, ""), [rec_id, *params], binary=True)
            if not rows:
                return None
            record = _latest_records(rows, _record_row(start), MemoryRecord)[0]
            if record is not None:
                return record
        # the record is built from its checked payload, tags and all: mnemo_tags is not read
        found = self._get(rec_id, scopes, "latest", False)
        return None if found is None else build(found)

    def select_records(
        self, query: Query, scopes: ScopeFilter, build: Callable[[list[Found]], list[MemoryRecord]]
    ) -> list[MemoryRecord]:
        """select's records, each its latest version as a MemoryRecord: read, checked and built in one
        call (_latest_records), each record's tags those of its put, as select takes them (a record whose
        put does not hold the tags asked for is left out, and the query read again without it when it
        has a limit). If that call gives nothing for a record (a check failed, fields it does not decode),
        or in a transaction, select's general path reads them again and `build` makes the records, or
        says what is wrong."""
        if self.current_batch() is not None:
            return build(self.select(query, scopes))
        left_out: list[str] = []
        while True:
            source, where, params, limit = _select_from(query, scopes, left_out)
            rows, start = self._fetch_at(records_sql(source, where, limit), params, binary=True)
            records = _latest_records(rows, _record_row(start), MemoryRecord)
            if None in records:
                return build(self.select(query, scopes))
            out = cast(list[MemoryRecord], records)
            misses = _tag_misses(query, out)
            if misses:
                missed = set(misses)
                out = [record for record in out if record.id not in missed]
            if not misses or query.limit is None:
                return out
            left_out += misses

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
        # The overlay's records are left out of what the tables hold: by the query when it has a limit
        # (which must count the others only), else below, so as not to send every id of a long
        # transaction with each read of it. Records whose checked tags did not match are left out here.
        source, where, params, limit = _select_from(
            query, scopes, [*left_out, *(overlay if query.limit is not None else ())])
        # the latest version's entry, and its payload, or what checks it without its content
        loaded = ("c.raw, c.payload" if payloads else "c.raw, mnemo_payload_summary(c.payload)"
                  ) if payloads or check_tags else None
        # With check_tags, a record's tags are its put's (what mnemo_tags lists is not read for them)
        rows = self._fetch(latest_sql(source, where, limit, loaded, False, index_tags=not check_tags), params, conn,
                           binary=True)
        out: list[Found] = []
        misses: list[str] = []
        unreadable: list[int] = []  # where in `out` a record whose put's tags do not read as strings is
        # each row's packed fields checked in one call (None: checked one by one, by _checked, below)
        served = _served_rows(rows, SERVED_COLUMNS) if payloads and check_tags and batch is None else None
        end = 0  # past the rows of the record at hand: its latest version's is the one before
        for rec, versions in group_rows(rows, with_payloads=True):
            end += len(versions)
            if rec.id in overlay:
                continue
            if not check_tags:
                out.append(self._found(rec, versions, "latest" if payloads else "none", batch))
                continue
            if payloads:
                quick = served[end - 1] if served is not None else None
                packed = quick if quick is not None else self._checked(rec, rec.latest, *versions[-1], batch)
                tags = _put_tags(packed)
            else:
                tags = self._summary_tags(rec, *versions[-1])
            if tags is None:
                unreadable.append(len(out))  # given the tags mnemo_tags lists, below
            elif not query.matches(tags):
                misses.append(rec.id)
                continue
            else:
                rec = Rec(rec.id, rec.scope, tags, rec.versions)
            out.append(Found(rec, (packed,)) if payloads else Found(rec))
        if unreadable:
            out = self._index_tags(out, unreadable, conn)
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

    def _index_tags(self, found: list[Found], where: list[int], conn: psycopg.Connection[Any] | None) -> list[Found]:
        """`found` with the records at `where` given the tags mnemo_tags lists for them: those of records
        whose put holds tags that do not read as a list of strings (the client, which decodes the fields
        it is served, says what is wrong with them)."""
        ids = [found[i].rec.id for i in where]
        rows = self._fetch("SELECT t.id, array_agg(t.tag ORDER BY t.tag) FROM mnemo_tags t "
                           "WHERE t.id = ANY(%s::text[]) GROUP BY t.id", [ids], conn)
        listed = {rec_id: tuple(tags) for rec_id, tags in rows}
        out = list(found)
        for i in where:
            rec, packed = out[i]
            out[i] = Found(rec._replace(tags=listed.get(rec.id, ())), packed)
        return out

    def counts(self, scopes: ScopeFilter) -> tuple[int, int, int]:
        batch = self.current_batch()
        if batch is not None and batch.recs:
            # the tags as mnemo_tags holds them: counting reads no payload
            visible = [f.rec for f in self._select(Query(), scopes, False, [], check_tags=False)[0]]
            return len(visible), sum(len(r.versions) for r in visible), len({t for r in visible for t in r.tags})
        where, params = scope_sql(scopes)
        rows = self._fetch(
            f"SELECT (SELECT count(*) FROM mnemo_records r WHERE {where}), "
            f"(SELECT count(*) FROM mnemo_versions v JOIN mnemo_records r ON r.id = v.id WHERE {where}), "
            f"(SELECT count(DISTINCT t.tag) FROM mnemo_tags t JOIN mnemo_records r ON r.id = t.id WHERE {where})",
            params * 3, self._batch_conn(),
        )
        records, versions, tags = rows[0]
        return int(records), int(versions), int(tags)

    def usage(self, scope: str, tag: str, tag_prefix: str | None = None) -> Usage:
        batch = self.current_batch()
        overlay = batch.recs if batch is not None else {}
        query = Query((tag,), tag_prefix=tag_prefix)
        rows = self._fetch(*usage_sql(scope, query), self._batch_conn())
        records: dict[str, list[tuple[int, int]]] = {}
        latest: dict[str, int] = {}
        for rec_id, rver, vver, size in rows:
            if rec_id in overlay:
                continue
            records.setdefault(rec_id, []).append((vver, size))
            latest[rec_id] = rver
        for rec in batch.matching(query, scope.__eq__) if batch is not None else ():
            records[rec.id] = [(v.ver, v.size) for v in rec.versions]
            latest[rec.id] = rec.latest.ver
        live = sum(size for rec_id, vs in records.items() for ver, size in vs if ver == latest[rec_id])
        return Usage(len(records), live, sum(map(len, records.values())),
                     sum(size for vs in records.values() for _v, size in vs))

    # -- the contract: recall -------------------------------------------------------------------------
    def recall(
        self, query: RecallQuery, scopes: ScopeFilter, tags: Query, limit: int, mode: str = "lexical"
    ) -> list[Hit]:
        """Recall over the text index's tables (text_index.py): the corpus's statistics and the postings of
        every term the query names or its prefixes reach (a phrase's words with their positions), in one
        statement (which brings the head too, when the client reads through read_fresh); the texts of the
        documents holding every word of a phrase whose positions the index does not keep (or, inside a
        transaction, of every document holding them), in one more when there are any; the hits' latest
        versions, read and checked as select reads them, in one more (none if all were read for a
        phrase).

        The tables are the index, not the truth: a hit is served only if its record's latest version is
        the one indexed, its checked content matches the query and its checked tags match `tags`. A hit
        whose record changed since the index was read (a commit in between) makes the index be read
        again; one the chain contradicts (a row the application role wrote) is left out and the rest
        ranked again, so that `limit` is still met (verify names the row)."""
        if limit == 0:
            return []
        if mode != "lexical":
            return self._recall_by_meaning(query, scopes, tags, limit, mode)
        if limit == 0:
            return []
        batch = self.current_batch()
        conn = self._batch_conn()
        exact, prefixes = query.looked_up
        # the records this transaction changed that were committed: their committed documents leave
        touched = [] if batch is None else [
            rec_id for rec_id, rec in batch.recs.items() if rec is None or rec.versions[0].slot_off >= 0
        ]
        # the best documents' records read with the index, for a query of words and prefixes only (the
        # ranking of its postings is BM25 over them: recall_sql), outside a transaction (whose own writes
        # may rank among them), without tags to filter the hits by, and unless its terms had more postings
        # than the statement ranks at their last recall (its count of them costs a little)
        seen = self._postings_seen
        prefetch = limit + PREFETCH_SLACK if (
            batch is None and not query.exclude and not tags.filters_tags and limit <= PREFETCH_MAX
            and not any(isinstance(clause, Phrase) for clause in query.include)
            and sum(seen.get(term, 0) for term in (*exact, *(prefix + "*" for prefix in prefixes)))
            <= PREFETCH_POSTINGS) else 0
        sql, params = recall_sql(exact, prefixes, scopes, tags, touched, query.phrase_atoms, prefetch)
        filtered = tags.filters_tags
        left_out: set[int] = set()  # documents the chain contradicts
        suspects: set[int] = set()  # documents found changed once
        for _attempt in range(RECALL_READS):
            loaded: Loaded = {}
            prefetched: Prefetched = {}
            base = self._read_text_index(sql, params, exact, prefixes, filtered, loaded, scopes, batch, conn,
                                         prefetched)
            if len(seen) > POSTINGS_SEEN:
                seen.clear()
            seen.update(base.sizes(exact, prefixes))
            self._load_phrase_texts(query, base, loaded, scopes, batch, conn)
            changed = None
            while changed is None:
                try:
                    return self._rank(query, tags, limit, base, loaded, prefetched, left_out, scopes, batch, conn)
                except _Unserved as exc:
                    if exc.changed:
                        changed = exc.seq
                    else:
                        left_out.add(exc.seq)
            # A hit's record changed since the index was read: read it again. The same document found
            # changed twice is the index's doing, not a commit's: it is left out.
            if changed in suspects:
                left_out.add(changed)
            suspects.add(changed)
        raise IntegrityError(f"{self.path}: recall could not read its hits: the records keep changing under it")

    def _read_text_index(
        self, sql: str, params: list[Any], exact: list[str], prefixes: list[str], filtered: bool,
        loaded: Loaded, scopes: ScopeFilter, batch: Batch | None, conn: psycopg.Connection[Any] | None,
        prefetched: Prefetched | None = None,
    ) -> TableSource:
        """The index as recall reads it (one round trip); the texts it gives phrases are read into `loaded`,
        and the rows of the records it read with it (recall_sql's prefetch) into `prefetched`, each
        record's by the seq of each of its versions (checked when one is a hit: _recall_hits)."""
        rows = self._fetch(sql, params, conn, binary=True)
        if rows and len(rows[0]) > INDEX_COLUMNS:
            records: dict[str, list[Any]] = {}
            for row in sorted((row[INDEX_COLUMNS:] for row in rows if row[0] == PREFETCHED), key=_id_and_version):
                records.setdefault(row[0], []).append(row)
            for versions in records.values():
                for row in versions:
                    if prefetched is not None:
                        prefetched[row[PREFETCHED_SEQ]] = versions
            rows = [row[:INDEX_COLUMNS] for row in rows if row[0] != PREFETCHED]
        try:
            return TableSource(rows, exact, prefixes, filtered,
                               lambda seq: self._indexed_text(seq, loaded, scopes, batch, conn))
        except IndexDisagrees as exc:
            raise IntegrityError(f"{self.path}: the text index disagrees with itself ({exc}): run verify") from None

    def _rank(
        self, query: RecallQuery, tags: Query, limit: int, base: TableSource, loaded: Loaded, prefetched: Prefetched,
        left_out: set[int], scopes: ScopeFilter, batch: Batch | None, conn: psycopg.Connection[Any] | None,
    ) -> list[Hit]:
        """The best hits over `base` as this thread's open transaction sees it, none of `left_out`."""
        tagged = base.tagged

        def keep(key: int | Staged) -> bool:
            if isinstance(key, Staged):
                rec = batch.recs[key.rec_id] if batch is not None else None
                return rec is not None and tags.matches(rec.tags)
            return key not in left_out and (tagged is None or key in tagged)

        def staged_text(rec: Rec) -> str | None:
            assert batch is not None  # the overlay reads only the records of an open transaction
            return searchable_text(self._overlay_found(rec, "latest", batch, conn).packed[0])

        source: Any = in_transaction(base, batch, scopes, base.touched.get, staged_text)
        ranked = search(query, source, limit, keep)
        return self._recall_hits(query, tags, ranked, loaded, prefetched, scopes, batch, conn)

    def _load_texts(
        self, seqs: list[int], scopes: ScopeFilter, batch: Batch | None, conn: psycopg.Connection[Any] | None,
        loaded: Loaded,
    ) -> None:
        """The records that `scopes` admits whose versions include one of `seqs`, each with the packed
        fields of its latest version (checked against its put) and the tags that put holds, into `loaded`
        by those seqs, None for a seq no such record has (one round trip)."""
        where, params = scope_sql(scopes)
        source = ("(SELECT DISTINCT w.id FROM unnest(%s::bigint[]) c(seq) JOIN mnemo_versions w ON w.seq = c.seq) c "
                  f"CROSS JOIN LATERAL {records_of('c.id')}")
        rows = self._fetch(latest_sql(source, where, "", "c.raw, c.payload", False, index_tags=False),
                           [seqs, *params], conn, binary=True)
        self._loaded_rows(rows, set(seqs), batch, loaded, conn)
        for seq in seqs:
            loaded.setdefault(seq, None)

    def _loaded_rows(
        self, rows: list[Any], wanted: set[int] | None, batch: Batch | None, loaded: Loaded,
        conn: psycopg.Connection[Any] | None,
    ) -> None:
        """The records of `rows` (latest_sql's, with the latest payloads and without the tags), each with the
        packed fields of its latest version (checked against its put) and the tags that put holds (those
        mnemo_tags lists when they do not read as a list of strings, read in one more statement), into
        `loaded` by the seqs of their versions (those of `wanted` only, when given)."""
        found: list[Found] = []
        packs: list[bytes] = []
        unreadable: list[int] = []
        # each row's packed fields checked in one call, as select's (None: checked by _checked, below)
        served = _served_rows(rows, SERVED_COLUMNS) if batch is None else None
        end = 0  # past the rows of the record at hand: its latest version's is the one before
        for rec, versions in group_rows(rows, with_payloads=True):
            end += len(versions)
            quick = served[end - 1] if served is not None else None
            packed = quick if quick is not None else self._checked(rec, rec.latest, *versions[-1], batch)
            put_tags = _put_tags(packed)
            if put_tags is None:
                unreadable.append(len(found))
            found.append(Found(rec if put_tags is None else rec._replace(tags=put_tags)))
            packs.append(packed)
        if unreadable:
            found = self._index_tags(found, unreadable, conn)
        for (rec, _none), packed in zip(found, packs, strict=True):
            for version in rec.versions:
                if wanted is None or version.seq in wanted:
                    loaded[version.seq] = (rec, packed)

    def _load_phrase_texts(
        self, query: RecallQuery, source: TableSource, loaded: Loaded, scopes: ScopeFilter,
        batch: Batch | None, conn: psycopg.Connection[Any] | None,
    ) -> None:
        """The texts the ranking will read, in one round trip: for each phrase of the query, those of the
        documents holding every word of it whose positions the index does not keep, or, when it is read
        through an open transaction's writes, of every document holding every word of it."""
        wanted: set[int] = set()
        overlaid = batch is not None and bool(batch.recs)  # (in_transaction's condition)
        for clause in (*query.include, *query.exclude):
            if isinstance(clause, Phrase):
                decided = None if overlaid else source.phrase(clause.atoms)
                if decided is not None:
                    wanted.update(decided[1])
                    continue
                lists = sorted((source.postings(atom) for atom in set(clause.atoms)), key=len)
                wanted.update(key for key in lists[0] if all(key in other for other in lists[1:]))
        wanted.difference_update(source.touched.values())  # the open transaction's documents of them are its own
        if wanted:
            self._load_texts(sorted(wanted), scopes, batch, conn, loaded)

    def _indexed_text(
        self, seq: int, loaded: Loaded, scopes: ScopeFilter, batch: Batch | None,
        conn: psycopg.Connection[Any] | None,
    ) -> str:
        """The text of the document of `seq`: its record's latest version, which must be that one
        (_Unserved otherwise)."""
        if seq not in loaded:
            self._load_texts([seq], scopes, batch, conn, loaded)
        found = loaded.get(seq)
        if found is None or found[0].latest.seq != seq:
            raise _Unserved(seq, changed=True)
        try:
            text = searchable_text(found[1])
        except Exception:  # msgpack raises several unrelated types on garbage: no text
            text = None
        if text is None:
            raise _Unserved(seq, changed=False)
        return text

    def _recall_hits(
        self, query: RecallQuery, tags: Query, ranked: list[tuple[int | Staged, float]],
        loaded: Loaded, prefetched: Prefetched, scopes: ScopeFilter, batch: Batch | None,
        conn: psycopg.Connection[Any] | None,
    ) -> list[Hit]:
        """The ranked documents as hits, each record's latest version checked (those read with the index
        from their rows, the others read in one round trip, but those read for a phrase); _Unserved for the
        first the chain does not bear out."""
        wanted = [key for key, _score in ranked if isinstance(key, int) and key not in loaded]
        rows = {id(versions): versions for key in wanted if (versions := prefetched.get(key)) is not None}
        if rows:
            self._loaded_rows([row for versions in rows.values() for row in versions], None, batch, loaded, conn)
        missing = [key for key in wanted if key not in loaded]
        if missing:
            self._load_texts(missing, scopes, batch, conn, loaded)
        hits: list[Hit] = []
        for key, score in ranked:
            if isinstance(key, Staged):
                assert batch is not None
                rec = batch.recs[key.rec_id]
                assert rec is not None  # the overlay's documents are its live records
                hits.append(Hit(self._overlay_found(rec, "latest", batch, conn), score))
                continue
            text = self._indexed_text(key, loaded, scopes, batch, conn)
            found = loaded[key]
            assert found is not None  # _indexed_text found it
            rec, packed = found
            if not query.matches(text) or not tags.matches(rec.tags):
                raise _Unserved(key, changed=False)
            hits.append(Hit(Found(rec, (packed,)), score))
        return hits

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
        self, pubkey: bytes | None, expect_head: tuple[int, str] | None, progress: Progress | None = None,
        embeddings: str = "check",
    ) -> VerifyReport:
        return verify_postgres(self, pubkey, expect_head, progress, embeddings == "recompute")

    def compact(self) -> dict[str, int]:
        """Rewrite the tables that held erased bytes (payloads, records, which hold their latest payload's
        copy, and tags by VACUUM FULL, the text index's
        terms by CLUSTER, in term order; with their TOAST tables and indexes): each is rewritten into new
        files and the old ones are removed, so that no file of the database keeps the bytes of a forgotten
        record's dead rows; then VACUUM the terms, whose rewrite left them no visibility map. Needs the
        tables' owner."""
        if self.current_batch() is not None:
            raise MnemoError("compact() cannot run inside a transaction")
        self.check_writable()
        # the bytes of the tables' pages, with their TOAST tables and indexes: not their visibility and
        # free space maps, which the VACUUM of the terms below makes and a rewrite leaves out
        size = (
            "WITH r AS (SELECT to_regclass(t)::oid AS oid FROM unnest(%s::text[]) t WHERE to_regclass(t) IS NOT NULL), "
            "w AS (SELECT oid FROM r UNION SELECT c.reltoastrelid FROM pg_class c JOIN r USING (oid) "
            "WHERE c.reltoastrelid <> 0) "
            "SELECT coalesce(sum(pg_relation_size(x.oid)), 0) FROM (SELECT oid FROM w "
            "UNION SELECT i.indexrelid FROM pg_index i JOIN w ON i.indrelid = w.oid) x"
        )
        # each rewritten table, by the command that rewrites it: the terms in term order, so that a term's
        # postings are together (CLUSTER is VACUUM FULL's rewrite, in an index's order)
        rewrites = {"mnemo_payloads": ("VACUUM FULL", "VACUUM (FULL) mnemo_payloads"),
                    "mnemo_records": ("VACUUM FULL", "VACUUM (FULL) mnemo_records"),
                    "mnemo_tags": ("VACUUM FULL", "VACUUM (FULL) mnemo_tags"),
                    "mnemo_terms": ("CLUSTER", "CLUSTER mnemo_terms USING mnemo_terms_term"),
                    "mnemo_vectors": ("VACUUM FULL", "VACUUM (FULL) mnemo_vectors")}
        rewritten = list(rewrites)
        tables = [*rewritten, "mnemo_versions", "mnemo_docs"]
        owned = self._fetch(
            "SELECT bool_and(pg_has_role(current_user, c.relowner, 'USAGE')) FROM pg_class c "
            "WHERE c.oid = ANY(ARRAY(SELECT to_regclass(t) FROM unnest(%s::text[]) t))", [rewritten]
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
                        # the departures every client has read or will read again whole (vectors.py)
                        conn.execute(PRUNE)
                        for table, (command, statement) in rewrites.items():
                            try:
                                conn.execute(statement)
                            except pg_errors.LockNotAvailable:
                                raise horizon.held(self._fetch, table, self.lock_timeout, self.path,
                                                   command) from None
                    finally:  # the read connection's later reads wait as long as they always did
                        with contextlib.suppress(psycopg.Error):
                            conn.execute("RESET lock_timeout")
                after = int(self._fetch(size, [tables])[0][0])
                # the rewritten terms' visibility map (a rewrite leaves none), so that recall reads their
                # postings from the index alone (schema/v5_v8.py, version 8); an autovacuum of them at work
                # (SKIP_LOCKED) sets it itself
                with self._read_lock:
                    self._reads().execute("VACUUM (SKIP_LOCKED) mnemo_terms")
            except psycopg.Error as exc:
                raise storage_error(exc, self.path) from None
            finally:
                assert isinstance(writer, BatchView) and writer.conn is not None
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
