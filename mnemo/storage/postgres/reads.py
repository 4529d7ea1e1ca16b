"""PostgresStore's part that serves the contract's reads: a record by its id (get, get_record), the records a
query admits (select, select_records), their counts and a scope's usage, and the records of documents
named by their seqs (which recall reads its hits by). Each payload served is checked against the entry
of its put (sql.py: in C when mnemo._pgread is built); a record's tags are those its put holds, a
mnemo_tags row only making it a candidate."""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from operator import attrgetter, contains
from typing import Any, cast

import psycopg

from ..._native import pgread
from ...chain.codec import decode_record_fields, served_digest_problem, served_put_problem, unpackb
from ...errors import IntegrityError
from ...record import MemoryRecord
from ..batch import Batch
from ..types import Found, Payloads, Query, Rec, ScopeFilter, Usage, Version
from .commit import Commits
from .sql import (
    RECORD_ROW,
    group_rows,
    latest_records,
    latest_sql,
    records_of,
    records_sql,
    scope_sql,
    select_source,
    served_rows,
    usage_sql,
)

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


class Reads(Commits):
    """The contract's reads of records, each payload checked against the chain."""

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

    # -- the records of documents, by their seqs (recall's hits) ----------------------------------------
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


__all__ = ["SERVED_COLUMNS", "Loaded", "Reads"]
