"""The contract's reads: records looked up in the in-memory index, their payloads read from the log and
checked against the chain before they are served, and the log's entries in order.

A read takes the log's handle in the same hold of the index lock as the records it reads: a
compaction replaces the log and the index together under that lock, so the offsets a record gives
are always those of the file the handle reads, and a replaced log stays open until its last reader
lets go (handles.py). A compaction therefore never fails a read. A read that meets an erased slot
(another process forgot the record) looks again, and answers as for a missing id."""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterator
from typing import Any, cast

from ..._native import readpath
from ...acl import Acl
from ...chain.codec import SALT_SIZE, decode_put_payload, served_put_problem
from ...errors import IntegrityError, NotFound
from ...record import MemoryRecord
from ..batch import Batch
from ..records import record_of
from ..types import Found, LogItem, Payloads, Query, Rec, ScopeFilter, Usage, Version
from .framing import SLOT_CRC, slot_state
from .handles import LogHandle
from .index import Index
from .logfile import pread
from .reader import log_items
from .state import StoreState

_NO_SCOPE = ""  # not a valid scope, so no record is in it (and no filter admits it)


class Reads(StoreState):
    """FileStore's part that serves reads."""

    def read_packed(
        self, version: Version, batch: Batch | None = None, rec_id: str = "", scope: str = "",
        handle: LogHandle | None = None,
    ) -> bytes | memoryview:
        """The packed record fields of one version (its payload without the salt), checked against the
        chain: the entry it is served as must be the one the index names (same chain hash) and a put of
        this record, version and scope, and the payload must match the digest that entry commits to. So
        a payload rewritten in the file, even with its checksum recomputed, is never served. NotFound if
        its slot was erased meanwhile. Read through `handle` (the log's handle taken with the version from
        the index: see get), else through the current log's."""
        if version.slot_off < 0:
            if batch is None or version.seq not in batch.payloads:
                raise NotFound("staged version is not visible outside its transaction")
            return decode_put_payload(batch.payloads[version.seq])[1]
        e_off, e_len, offset, length = version.entry_off, version.entry_len, version.slot_off, version.slot_len
        handles = self._handles
        own = handle is None
        if handle is None:
            handle = handles.acquire()
        try:
            # (views: their slices copy nothing)
            if e_off + e_len == offset:  # one entry in its frame: the entry's bytes end where its slot starts
                data = memoryview(pread(handle.fd, e_len + length, e_off))
                raw, slot = data[:e_len], data[e_len:]
            else:
                slot = memoryview(pread(handle.fd, length, offset))
                raw = memoryview(pread(handle.fd, e_len, e_off)) if e_off >= 0 else memoryview(b"")
        finally:
            if own:
                handles.release(handle)
        state = slot_state(slot) if len(slot) == length and length >= SLOT_CRC.size else "bad"
        if state == "erased":
            raise NotFound("the record was forgotten")
        if state != "ok":
            raise IntegrityError(f"{self.path}: payload slot damaged at offset {offset}", offset)
        payload = slot[SLOT_CRC.size :]
        why = served_put_problem(raw, version.hash, rec_id, version.ver, scope, payload)
        if why is not None:
            raise IntegrityError(f"{self.path}: the payload at offset {offset} is not served: {why}", offset)
        return payload[SALT_SIZE:]

    # -- the contract's reads ------------------------------------------------------------------------
    def head(self) -> tuple[int, bytes]:
        batch = self.current_batch()
        if batch is not None:
            return batch.head_seq, batch.head_hash
        with self._index_lock:
            return self.index.head_seq, self.index.head_hash

    def acl(self) -> Acl:
        batch = self.current_batch()
        return batch.acl if batch is not None else self.index.acl

    def get(self, rec_id: str, scopes: ScopeFilter, payloads: Payloads = "latest") -> Found | None:
        batch = self.current_batch()
        for _attempt in range(5):
            with self._index_lock:  # the index changes rows in place: never read one half-written
                rec = self._admitted(rec_id, scopes, batch)
                if rec is None or payloads == "none":
                    return None if rec is None else Found(rec)
                handle = self._handles.acquire()  # the log its offsets are in (see the module docstring)
            versions = rec.versions if payloads == "all" else (rec.latest,)
            try:
                try:
                    quick = self._quick_packed([(rec, v) for v in versions], handle)
                    packed = tuple(
                        p if p is not None else self._packed(rec, v, batch, handle)
                        for v, p in zip(versions, quick, strict=True)
                    ) if None in quick else cast(tuple[bytes | memoryview, ...], tuple(quick))
                finally:
                    self._handles.release(handle)  # before the index lock is taken again (handles.drain)
            except (NotFound, IntegrityError):
                self.refresh()  # forgotten (erased) by another process meanwhile?
                with self._index_lock:
                    now = self._admitted(rec_id, scopes, batch)
                if now == rec:
                    raise
                continue
            return Found(rec, packed)
        return None

    def _admitted(self, rec_id: str, scopes: ScopeFilter, batch: Batch | None) -> Rec | None:
        """The record if `scopes` admits it (see _admitted_row). Only an admitted record is built."""
        row, rec = self._admitted_row(rec_id, scopes, batch)
        return self.index.rec_at(row, rec_id) if row is not None else rec

    def _admitted_row(self, rec_id: str, scopes: ScopeFilter, batch: Batch | None) -> tuple[int | None, Rec | None]:
        """(its index row, None), or (None, the record) for one this thread's transaction wrote, if
        `scopes` admits the record; (None, None) if not, or if there is none. A missing id and one not
        admitted take the same steps, so that timing does not tell them apart: one index lookup, one
        scope read from the index (for a missing id, that of a row the id's hash picks), the filter asked
        about it (for a missing id, its answer then set aside)."""
        index = self.index
        row: int | None = None
        rec: Rec | None = None
        if batch is not None and rec_id in batch.recs:  # written (or forgotten) in this transaction
            rec = batch.recs[rec_id]
            scope = _NO_SCOPE if rec is None else rec.scope
        else:
            row = index.row_of(rec_id)
            live = index.live
            probe = hash(rec_id) % live if live else 0
            scope = index.scope_at(probe if row is None else row) if live else _NO_SCOPE
        # For a missing id the filter is asked about the scope of the row its hash picked, a scope some
        # record has, and its answer set aside: asking about a scope no record has cost less (a set's
        # look-up of another string), which told many missing ids from unreadable ones.
        if not scopes.admits(scope) or (row is None and rec is None):
            return None, None
        return row, rec

    def get_record(
        self, rec_id: str, scopes: ScopeFilter, build: Callable[[Found], MemoryRecord]
    ) -> MemoryRecord | None:
        """The latest version of a record `scopes` admits, as a MemoryRecord: read, checked and built in
        one call (_latest_rows, from its index row; _latest, for one this thread's transaction wrote);
        where that gives nothing (a check failed, the slot was erased meanwhile, a
        version staged in a transaction, fields it does not decode), get's general path reads it again
        and `build` makes the record, or says what is wrong. None for a missing or unreadable id."""
        batch = self.current_batch()
        with self._index_lock:  # the index changes rows in place: never read one half-written
            row, rec = self._admitted_row(rec_id, scopes, batch)
            if row is None and rec is None:
                return None
            gathered = None if row is None else self._gather([(rec_id, row)])
            handle = self._handles.acquire()  # the log its offsets are in (see the module docstring)
        try:
            if gathered is None:
                assert rec is not None
                record = self._latest([rec], handle)[0]
            else:
                record = self._latest_rows(gathered, handle)[0]
        finally:
            self._handles.release(handle)
        if record is not None:
            return record
        found = self.get(rec_id, scopes)  # the general path: read again, or what is wrong said
        return None if found is None else build(found)

    def select(self, query: Query, scopes: ScopeFilter, payloads: bool = True) -> list[Found]:
        batch = self.current_batch()
        recs, handle = self._selected(query, scopes, batch, payloads)
        if handle is None:
            return [Found(rec) for rec in recs]
        out: list[Found | None] = []
        try:
            for rec, quick in zip(recs, self._quick_packed([(r, r.latest) for r in recs], handle), strict=True):
                out.append(Found(rec, (quick,)) if quick is not None else self._found(rec, batch, handle))
        finally:
            self._handles.release(handle)
        return [found for found in self._found_again(out, recs, scopes) if found is not None]

    def select_records(
        self, query: Query, scopes: ScopeFilter, build: Callable[[list[Found]], list[MemoryRecord]]
    ) -> list[MemoryRecord]:
        """select's records, each the latest version as a MemoryRecord: read, checked and built in one
        call from the index's rows (_latest_rows); those it gives nothing for are read again by get's
        general path (which leaves out one forgotten meanwhile, and says what is wrong with a damaged
        one), and `build` makes their records (or says what is wrong)."""
        batch = self.current_batch()
        if batch is not None and batch.recs:
            return self._overlaid_records(query, scopes, batch, build)
        with self._index_lock:
            hits = self._matched(query, scopes)
            gathered = self._gather(hits)
            handle = self._handles.acquire()  # the log the rows' offsets are in (see the module docstring)
        try:
            records = self._latest_rows(gathered, handle)
        finally:
            self._handles.release(handle)  # before the index lock is taken again (handles.drain)
        if None not in records:
            return cast(list[MemoryRecord], records)
        founds = [self.get(hit[0], scopes) if record is None else None
                  for hit, record in zip(hits, records, strict=True)]
        built = iter(build([f for f in founds if f is not None]))
        return [r if r is not None else next(built) for f, r in zip(founds, records, strict=True)
                if r is not None or f is not None]

    def _overlaid_records(
        self, query: Query, scopes: ScopeFilter, batch: Batch, build: Callable[[list[Found]], list[MemoryRecord]]
    ) -> list[MemoryRecord]:
        """select_records in a transaction that wrote: the index's records with the batch's over them,
        each read as _latest reads it, and those it gives nothing for through select's general path."""
        recs, handle = self._selected(query, scopes, batch, True)
        assert handle is not None
        general: list[Found | None] = []
        try:
            records = self._latest(recs, handle)
            if None in records:
                general = [self._found(rec, batch, handle) if record is None else Found(rec)
                           for rec, record in zip(recs, records, strict=True)]
        finally:
            self._handles.release(handle)
        if not general:
            return cast(list[MemoryRecord], records)
        founds = self._found_again(general, recs, scopes)
        built = iter(build([f for f, r in zip(founds, records, strict=True) if f is not None and r is None]))
        return [r if r is not None else next(built) for f, r in zip(founds, records, strict=True) if f is not None]

    def _selected(
        self, query: Query, scopes: ScopeFilter, batch: Batch | None, payloads: bool
    ) -> tuple[list[Rec], LogHandle | None]:
        """The records `query` selects among those `scopes` admits, in id order, and (if `payloads`) the
        log's handle their offsets are in (see get), taken in the same hold of the index lock."""
        with self._index_lock:
            base = self.index
            if batch is not None and batch.recs:
                matched = self._matched(query, scopes, ordered=False)
                overlay = batch.recs
                hits: list[tuple[str, int | Rec]] = [hit for hit in matched if hit[0] not in overlay]
                hits.extend((r.id, r) for r in batch.matching(query, scopes.admits))
                hits.sort(key=lambda hit: hit[0])
                if query.limit is not None:
                    del hits[query.limit :]
                recs = [base.rec_at(r, i) if isinstance(r, int) else r for i, r in hits]
            else:
                recs = base.recs_at(self._matched(query, scopes))  # only the records returned become Recs
            return recs, (self._handles.acquire() if payloads else None)

    def _matched(self, query: Query, scopes: ScopeFilter, ordered: bool = True) -> list[tuple[str, int]]:
        """(id, row) of the index's rows `query` selects among those `scopes` admits; `ordered`: by id,
        query.limit of them at most. Under the index lock. The index's candidates match the tag filters
        exactly; scopes are decided once per distinct scope, not per record."""
        base = self.index
        matched = base.rows_in_scopes(base.candidate_rows(query, scopes.only), scopes.admits)
        if ordered:
            matched.sort()  # (by id: ids are distinct, so rows are never compared)
            if query.limit is not None:
                del matched[query.limit :]
        return matched

    def _found(self, rec: Rec, batch: Batch | None, handle: LogHandle) -> Found | None:
        """The record with its latest version's packed fields through the general path (read_packed);
        None if that fails, to be looked up again once the handle is released (_found_again)."""
        try:
            return Found(rec, (self._packed(rec, rec.latest, batch, handle),))
        except (NotFound, IntegrityError):
            return None

    def _found_again(self, out: list[Found | None], recs: list[Rec], scopes: ScopeFilter) -> list[Found | None]:
        """`out` with each None looked up again (forgotten, being erased, by another process since the
        selection?): None still if it is gone."""
        for i, found in enumerate(out):
            if found is None:
                self.refresh()
                out[i] = self.get(recs[i].id, scopes)
        return out

    def _gather(self, hits: list[tuple[str, int]]) -> Gathered:
        """What _latest_rows reads for each (id, row) of the index, taken from the index's tables in the
        caller's hold of the index lock (the rows change in place): in one call of the C extension when
        it is there (mnemo/_readpath.c's gather_rows, which makes no Rec), else through gather_rows, its
        pure-Python twin."""
        if readpath is not None:
            return readpath.gather_rows(*self.index.tables(), hits)
        return gather_rows(self.index, hits)

    def _latest_rows(self, gathered: Gathered, handle: LogHandle) -> list[MemoryRecord | None]:
        """The latest version of each row _gather took as a MemoryRecord, read through `handle` (the
        log's handle taken in the same hold of the index lock: see get), checked and built as _latest
        does; None where _latest gives None, or where the index does not hold the row whole (rec_at
        then calls it inconsistent). In one call of the C extension when it is there
        (mnemo/_readpath.c's read_gathered), else through read_gathered, its pure-Python twin."""
        if readpath is not None:
            records: list[MemoryRecord | None] = readpath.read_gathered(handle.fd, gathered, MemoryRecord)
            return records
        return read_gathered(cast(list[Rec | None], gathered), handle.fd)

    def _latest(self, recs: list[Rec], handle: LogHandle) -> list[MemoryRecord | None]:
        """The latest version of each record as a MemoryRecord, read through `handle` (the log's handle
        taken with the records from the index: see get), checked as read_packed checks it and built
        as the client builds it; None where a check fails, the fields are not decoded here, or the
        version is staged (the general path then reads it, or says what is wrong). In one call of the
        C extension when it is there (mnemo/_readpath.c's read_latest), else through latest_records,
        its pure-Python twin."""
        if readpath is not None:
            records: list[MemoryRecord | None] = readpath.read_latest(handle.fd, recs, MemoryRecord)
            return records
        return latest_records(recs, handle.fd)

    def _quick_packed(
        self, items: list[tuple[Rec, Version]], handle: LogHandle
    ) -> list[bytes | memoryview | None]:
        """The packed fields of each (record, version), read through `handle` (the log's handle taken with
        the records from the index: see get) and checked as read_packed checks them (slot CRC, the
        entry's chain hash, that it is the put of this record, version and scope, the payload digest it
        commits to). None where a check fails, or for a version staged in a transaction: read_packed then
        reads it, or says what is wrong. In one call of the C extension when it is there
        (mnemo/_readpath.c, which takes the canonical layout of a put's entry and leaves any other to
        read_packed), else through quick_packed, its pure-Python twin."""
        if readpath is not None:
            served: list[bytes | memoryview | None] = readpath.read_served(handle.fd, items)
            return served
        return list(quick_packed(items, handle.fd))

    def _packed(self, rec: Rec, version: Version, batch: Batch | None, handle: LogHandle) -> bytes | memoryview:
        return self.read_packed(version, batch, rec.id, rec.scope, handle)

    def counts(self, scopes: ScopeFilter) -> tuple[int, int, int]:
        with self._index_lock:
            if scopes.everything and scopes.requested is None and self.current_batch() is None:
                return self.index.counts()  # a transaction's counts include its own writes: select()
        visible = [f.rec for f in self.select(Query(), scopes, payloads=False)]
        return len(visible), sum(len(r.versions) for r in visible), len({t for r in visible for t in r.tags})

    def usage(self, scope: str, tag: str, tag_prefix: str | None = None) -> Usage:
        batch = self.current_batch()
        query = Query((tag,), tag_prefix=tag_prefix)
        with self._index_lock:
            base = self.index
            # the candidates of that scope alone where the index lists the prefix's tags per scope
            rows = base.rows_with_tag(tag) if tag_prefix is None else base.candidate_rows(query, scope)
            assert rows is not None  # (the query has a tag)
            recs = [base.rec_at(row, i) for i, row in base.rows_in_scopes(rows, scope.__eq__)]
            if batch is not None and batch.recs:
                overlay = batch.recs
                recs = [r for r in recs if r.id not in overlay]
                recs.extend(batch.matching(query, scope.__eq__))
        versions = [v for r in recs for v in r.versions]
        return Usage(len(recs), sum(r.latest.size for r in recs), len(versions), sum(v.size for v in versions))

    def log(self, since: int = 0, payloads: bool = False) -> Iterator[LogItem]:
        for item in log_items(self.path, payloads, since, self._frame_marks):
            yield LogItem(item.entry, item.slot.state, item.payload, item.offset)

    def tree_head(self) -> tuple[int, bytes]:
        with self._index_lock:
            assert self.tree is not None
            head = self.tree.head()
            return head.size, head.root


def quick_packed(items: list[tuple[Rec, Version]], fd: int) -> list[memoryview | None]:
    """The packed fields of each (record, version) read from `fd`, or None where a check fails or the
    version is staged (Reads._quick_packed): the pure-Python twin of mnemo/_readpath.c's read_served,
    which must never serve what this refuses, nor anything else than what it serves."""
    out: list[memoryview | None] = []
    minimum = SLOT_CRC.size + SALT_SIZE + 1
    crc_of, crc_at = zlib.crc32, SLOT_CRC.unpack_from
    for rec, v in items:
        e_off, e_len, offset, length = v.entry_off, v.entry_len, v.slot_off, v.slot_len
        if offset < 0 or e_off < 0 or length < minimum:
            out.append(None)
            continue
        if e_off + e_len == offset:  # one entry in its frame: entry and slot are adjacent
            data = memoryview(os.pread(fd, e_len + length, e_off))
            raw, slot = data[:e_len], data[e_len:]
        else:
            slot, raw = memoryview(os.pread(fd, length, offset)), memoryview(os.pread(fd, e_len, e_off))
        if len(slot) != length or len(raw) != e_len:
            out.append(None)
            continue
        payload = slot[SLOT_CRC.size :]
        ok = crc_at(slot)[0] == crc_of(payload) and (
            served_put_problem(raw, v.hash, rec.id, v.ver, rec.scope, payload) is None
        )
        out.append(payload[SALT_SIZE:] if ok else None)
    return out



def latest_records(recs: list[Rec], fd: int) -> list[MemoryRecord | None]:
    """The latest version of each record read from `fd` as a MemoryRecord, or None where quick_packed
    gives None or the fields do not decode (Reads._latest): the pure-Python twin of mnemo/_readpath.c's
    read_latest, which must never serve what this refuses, nor a record other than this one's."""
    return [None if packed is None else record_of(rec, rec.latest, packed)
            for rec, packed in zip(recs, quick_packed([(r, r.latest) for r in recs], fd), strict=True)]


Gathered = Any
"""What Reads._gather takes from the index for _latest_rows: mnemo/_readpath.c's opaque gather_rows, or
gather_rows' list of records (None for a row the index does not hold whole)."""


def gather_rows(index: Index, hits: list[tuple[str, int]]) -> list[Rec | None]:
    """The record of each (id, row) of `index`, None where the index does not hold the row whole (rec_at
    calls it inconsistent): the pure-Python twin of mnemo/_readpath.c's gather_rows."""
    out: list[Rec | None] = []
    for rec_id, row in hits:
        try:
            out.append(index.rec_at_twin(row, rec_id))
        except IntegrityError:
            out.append(None)
    return out


def read_gathered(gathered: list[Rec | None], fd: int) -> list[MemoryRecord | None]:
    """latest_records of the records gather_rows gave, None where it gave None: the pure-Python twin of
    mnemo/_readpath.c's read_gathered."""
    built = iter(latest_records([rec for rec in gathered if rec is not None], fd))
    return [None if rec is None else next(built) for rec in gathered]
