"""In-memory indexes rebuilt from the chain: id -> versions and their file locations, tag -> records,
a sorted tag list for prefix queries, and the ACL. Content and metadata are never held here.

Records live in rows of typed columns (the `array` module) rather than one object per record: a
million records then cost a few hundred bytes each instead of over a kilobyte, and a snapshot loads
with a few bulk copies instead of building millions of objects. `Rec` and `Version` tuples are made
on demand, for the records a caller actually looks at. What the rows are made of is in index_columns.py,
what an index answers in index_reads.py, how it checks itself in index_check.py, its snapshot form in
index_state.py; this module holds Index, which changes the rows.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable
from itertools import islice
from typing import TYPE_CHECKING, Any

from ..._native import readpath, speedups
from ...acl import Acl
from ...chain.tree import HASH_SIZE
from ..types import Rec, Version
from .deferred import SnapshotParts
from .index_check import IndexChecks, posting_rows
from .index_columns import SortedIds, code_uses, remap_codes
from .index_reads import RecordsView
from .index_state import load_state, to_state
from .new_rows import NewRows, new_rows_twin
from .scoped_tags import FAMILY

if TYPE_CHECKING:
    from .scan import ScanResult

NewPut = tuple[str, str, tuple[str, ...], str, int, int, int, bytes, int, int, int, int, "str | None"]
"""Version 1 of a new record, as Index.put_one_new takes it: (id, scope, tags, agent, size, seq, ts_ns,
entry hash, slot offset, slot length, entry offset, entry length, its text or None)."""

# Postings up to this long drop a row at once; longer ones are cleaned lazily (see _unpost).
SMALL_POSTING = 64
# Up to this many tags gone in one drop_many leave the sorted tag list one by one; more, in one pass.
FEW_TAGS_GONE = 8
# Up to this many tags new to the index in one put_new join the sorted tag list one by one; more, in one sort.
FEW_TAGS_NEW = 8

__all__ = [
    "FEW_TAGS_GONE", "FEW_TAGS_NEW", "SMALL_POSTING", "Index", "NewPut", "Rec", "RecordsView", "Version",
    "code_uses", "posting_rows", "remap_codes",
]


class Index(IndexChecks):
    """The live records and their indexes: the reads (IndexReads) and the checks (IndexChecks) of its
    rows, and here the writes that change them. Not thread-safe on its own: rows change in place, so the
    store's index lock is held by whoever writes it and by readers that may race a writer."""

    # -- mutation ------------------------------------------------------------------------------------
    def acl_for_write(self) -> Acl:
        return self.acl

    def put(self, rec_id: str, scope: str, tags: tuple[str, ...], version: Version) -> None:
        """Record a new version (the caller checked its number with next_ver)."""
        row = self.row_of(rec_id)
        if row is None:
            self._new_row(rec_id, scope, tags, version)
            return
        c = self.cols
        tagset = self.tagsets.acquire(tags)  # before the old set's release: the same set is never freed between
        prev = self.rec_at(row)
        self.older[row] = prev.versions
        self.text.changed(row)
        if self.vectors is not None:
            self.vectors.changed(row)
        was, code = c["scope"][row], self.scopes.code(scope)
        if prev.tags != tags:
            for tag in prev.tags:
                if tag not in tags:
                    self._unpost(row, tag, was)
            for tag in tags:
                if tag not in prev.tags:
                    self._post(row, tag, code)
        if was != code and self._scoped is not None:  # (the client never moves a record; the index may)
            for tag in prev.tags:
                if tag in tags and tag.startswith(FAMILY):
                    self._scoped.remove(was, tag)
                    self._scoped.add(code, tag)
        self.tagsets.release(c["tagset"][row])
        c["scope"][row] = code
        c["tagset"][row] = tagset
        c["agent"][row] = self.agents.code(version.agent)
        c["ver"][row] = version.ver
        c["slot_len"][row] = version.slot_len
        c["seq"][row] = version.seq
        c["ts"][row] = version.ts_ns
        c["size"][row] = version.size
        c["slot_off"][row] = version.slot_off
        c["entry_off"][row] = version.entry_off
        c["entry_len"][row] = version.entry_len
        self.hashes[row * HASH_SIZE : (row + 1) * HASH_SIZE] = version.hash

    def _new_row(self, rec_id: str, scope: str, tags: tuple[str, ...], version: Version) -> int:
        """Put a record no row holds in a row of its own, at the end; returns the row."""
        row, _scope_code = self._append_row(
            rec_id, scope, tags, version.agent, version.ver, version.slot_len, version.seq, version.ts_ns,
            version.size, version.slot_off, version.entry_off, version.entry_len, version.hash,
        )
        return row

    def _append_row(
        self, rec_id: str, scope: str, tags: tuple[str, ...], agent: str, ver: int, slot_len: int, seq: int,
        ts_ns: int, size: int, slot_off: int, entry_off: int, entry_len: int, entry_hash: bytes,
    ) -> tuple[int, int]:
        """_new_row from a version's fields (no Version made): (the row, the scope's code)."""
        c = self.cols
        row = self.rows[rec_id] = self.base.n + len(self.extra)
        self.extra.append(rec_id)
        self.live += 1
        self.text.pending.add(row)  # (TextIndex.added of one row)
        if self.vectors is not None:
            self.vectors.added((row,))
        scope_code = self.scopes.code(scope)
        for tag in tags:
            self._post(row, tag, scope_code)
        c["scope"].append(scope_code)
        c["tagset"].append(self.tagsets.acquire(tags))
        c["agent"].append(self.agents.code(agent))
        c["ver"].append(ver)
        c["slot_len"].append(slot_len)
        c["seq"].append(seq)
        c["ts"].append(ts_ns)
        c["size"].append(size)
        c["slot_off"].append(slot_off)
        c["entry_off"].append(entry_off)
        c["entry_len"].append(entry_len)
        self.hashes += entry_hash
        return row, scope_code

    def put_one_new(self, p: NewPut) -> None:
        """put_new of one put (a `remember` alone), without put_new's passes over a list."""
        row, scope_code = self._append_row(p[0], p[1], p[2], p[3], 1, p[9], p[5], p[6], p[4], p[8], p[10], p[11], p[7])
        self.text.hold(row, scope_code, p[5], p[12])

    def new_rows(self, staged: list[Any], slots: list[Any], start: int, offset: int, entry_pos: int) -> NewRows:
        """The run of a frame's staged entries from `start` on that put version 1 of records no row holds,
        as columns for put_new (new_rows.py says which entries it takes and what it returns): in one call
        of the C extension when it is there (mnemo/_readpath.c's new_rows), else through new_rows_twin."""
        if readpath is not None:
            base = self.base
            run: NewRows = readpath.new_rows(NewRows, staged, slots, start, offset, entry_pos, self.rows, base.blob,
                                             base.width, self.base_dead)
            return run
        return new_rows_twin(staged, slots, start, offset, entry_pos, self.row_of)

    def put_new(self, new: NewRows) -> None:
        """Record version 1 of records no row holds, each as `put` and then `hold_text` would, in one
        pass over columns extended together (a transaction's new records, from new_rows). The caller
        checked that no row holds any of these ids and that they are distinct."""
        ids = new.ids
        n = len(ids)
        if not n:
            return
        first = self.base.n + len(self.extra)
        rows = range(first, first + n)
        self.rows.update(zip(ids, rows, strict=True))
        self.extra.extend(ids)
        self.live += n
        text = self.text
        text.added(rows)
        if self.vectors is not None:
            self.vectors.added(rows)
        tag_lists = new.tags
        tagsets = self.tagsets.acquire_many(tag_lists)
        scopes = self.scopes.codes_of(new.scopes)
        agents = self.agents.codes_of(new.agents)
        # _post of each row's tags, its call left out but where a `path:` tag is listed per scope: a row
        # appended to its tag's posting, a tag new to the index given one and put in the sorted tag list
        # after the loop (in one sort when there are many, as a transaction of new tags has)
        post, postings, scoped = self._post, self.postings, self._scoped
        get, fresh = postings.get, []
        for row, tags, code in zip(rows, tag_lists, scopes, strict=True):
            for tag in tags:
                if scoped is not None and tag.startswith(FAMILY):
                    post(row, tag, code)
                elif (posting := get(tag)) is not None:
                    posting.append(row)
                else:
                    postings[tag] = array("I", (row,))
                    fresh.append(tag)
        if len(fresh) <= FEW_TAGS_NEW:
            for tag in fresh:
                bisect.insort(self.sorted_tags, tag)
        else:
            self.sorted_tags += fresh
            self.sorted_tags.sort()
        c = self.cols
        # (array.fromlist converts a list in one pass; extend would go through an iterator)
        c["scope"].fromlist(scopes)
        c["tagset"].fromlist(tagsets)
        c["agent"].fromlist(agents)
        c["ver"].fromlist([1] * n)
        for name in ("seq", "ts", "size", "slot_off", "entry_off", "slot_len", "entry_len"):
            c[name].frombytes(getattr(new, name))
        self.hashes += new.hashes
        text.hold_many(rows, scopes, c["seq"][first:], new.texts)

    def hold_text(self, rec_id: str, seq: int, text: str | None) -> None:
        """The text of the version `seq` of `rec_id` (None: its content is bytes), just put by this
        process: the text index takes it instead of reading it back from the log (TextIndex.hold)."""
        row = self.row_of(rec_id)
        if row is not None:
            self.text.hold(row, self.cols["scope"][row], seq, text)

    def appends_to_base(self, first: bytes, width: int) -> bool:
        """Whether ids of `width` bytes in ascending order from `first` on can extend the sorted blob of
        ids: no rows after it, the same width, and `first` after its last id."""
        base = self.base
        return not self.extra and (not base.n or width == base.width and first > base.blob[-width:])

    def extend_new(self, res: ScanResult, n: int) -> None:
        """Append a row per record, as `put` does for a new one, for each of the first `n` entries of a
        scan of the log (mnemo/storage/file/scan.py, whose rows were numbered from this index's next
        row). The caller has checked that their ids are distinct, that none is in the index, and that
        each is version 1. Ids in ascending order after the index's own extend its sorted blob (the
        compact form a snapshot loads), with no dict entry or string per record."""
        first = self.base.n + len(self.extra)
        w = res.id_width
        if w and n <= res.id_run and self.appends_to_base(res.id_bytes[:w], w):
            self.base = SortedIds(self.base.blob + res.id_bytes[: n * w], w)
        else:
            ids = res.ids[:n]
            self.rows.update(zip(ids, range(first, first + n), strict=True))
            self.extra.extend(ids)
        self.text.added(range(first, first + n))
        if self.vectors is not None:
            self.vectors.added(range(first, first + n))
        self.live += n
        c = self.cols
        for name, packed in res.columns.items():
            c[name].frombytes(packed[: n * c[name].itemsize])
        for name, table, values, codes in (("scope", self.scopes, res.scopes, res.scope_codes),
                                           ("agent", self.agents, res.agents, res.agent_codes)):
            mapped = [table.code(v) for v in values]
            if mapped == list(range(len(mapped))):
                c[name].frombytes(codes[: 4 * n])  # the scan's codes are the index's
            else:
                c[name].extend(map(mapped.__getitem__, array("I", codes[: 4 * n])))
        sets = self.tagsets
        set_map: list[int | None] = list(map(sets.codes.get, res.tagsets))  # the tag sets already held
        uses, remap = (code_uses, remap_codes) if speedups is None else (speedups.code_uses, speedups.remap_codes)
        # (the tag sets of the entries after the first n only are neither counted nor acquired)
        for i, k in uses(res.tagset_codes, n, set_map, sets.refs):
            set_map[i] = sets.acquire(res.tagsets[i], k)
        c["tagset"].frombytes(remap(res.tagset_codes, n, set_map))  # every code of the first n set above
        self.hashes += res.hashes[: n * HASH_SIZE]
        # postings in row order, as `put` one by one leaves them (each tag's rows ascend: those of the
        # first n entries come first)
        rows = array("I", res.tag_rows)
        postings, at, end = self.postings, 0, first + n
        whole = n == res.entries
        for tag, k in zip(res.tags, array("I", res.tag_lens), strict=True):
            mine = rows[at:at + k] if whole else rows[at:bisect.bisect_left(rows, end, at, at + k)]
            at += k
            if not mine:
                continue
            posting = postings.get(tag)
            if posting is None:
                postings[tag] = mine
                bisect.insort(self.sorted_tags, tag)
            else:
                posting.extend(mine)
            if self._scoped is not None and tag.startswith(FAMILY):
                scope_col, add = c["scope"], self._scoped.add
                for row in mine:
                    add(scope_col[row], tag)

    def rebase_tail(self) -> None:
        """Move the rows after the sorted blob of ids into it, when their ids (those of the forgotten
        ones too, which then join `base_dead`) are ASCII of its width in ascending order after its last:
        the compact form a snapshot loads, with no dict entry per record. Rows keep their numbers."""
        extra, base = self.extra, self.base
        if not extra:
            return
        gone = self.extra_forgotten
        ids = [gone[row] if rec_id is None else rec_id for row, rec_id in enumerate(extra, base.n)]
        packed = SortedIds.pack(ids)
        if packed is None or not all(map(str.__lt__, ids, islice(ids, 1, None))):
            return
        if base.n and (packed.width != base.width or ids[0] <= base.at(base.n - 1)):
            return
        self.base_dead.update(row for row, rec_id in enumerate(extra, base.n) if rec_id is None)
        self.base = SortedIds(base.blob + packed.blob, packed.width)
        self.rows, self.extra, self.extra_forgotten = {}, [], {}

    def drop(self, rec_id: str) -> Rec | None:
        self.forgotten.add(rec_id)
        row = self.row_of(rec_id)
        if row is None:
            return None
        rec = self.rec_at(row)
        if row < self.base.n:
            self.base_dead.add(row)
        else:
            del self.rows[rec_id]
            self.extra[row - self.base.n] = None
            self.extra_forgotten[row] = rec_id
        self.live -= 1
        self.text.remove_row(row)
        if self.vectors is not None:
            self.vectors.remove_row(row)
        scope_code = self.cols["scope"][row]
        for tag in rec.tags:
            self._unpost(row, tag, scope_code)
        self.tagsets.release(self.cols["tagset"][row])
        self.cols["tagset"][row] = 0
        self.older.pop(row, None)
        return rec

    def drop_many(self, rec_ids: Iterable[str]) -> list[Rec]:
        """drop() each id; the records dropped. Their tags leave the sorted tag list in one pass."""
        gone: set[str] = set()
        self._unsorted = gone
        scoped = self._scoped
        if scoped is not None:
            scoped.begin_many()
        try:
            return [rec for rec in map(self.drop, rec_ids) if rec is not None]
        finally:
            self._unsorted = None
            if scoped is not None:
                scoped.end_many()
            if len(gone) <= FEW_TAGS_GONE:
                for tag in gone:
                    self._unsort(tag)
            elif gone:
                self.sorted_tags = [t for t in self.sorted_tags if t not in gone]

    def _unsort(self, tag: str) -> None:
        i = bisect.bisect_left(self.sorted_tags, tag)
        if i < len(self.sorted_tags) and self.sorted_tags[i] == tag:
            del self.sorted_tags[i]

    def _post(self, row: int, tag: str, scope_code: int) -> None:
        """Row `row`, of the scope of code `scope_code`, now holds `tag`."""
        if self._scoped is not None and tag.startswith(FAMILY):
            self._scoped.add(scope_code, tag)
        rows = self.postings.get(tag)
        if rows is None:
            self.postings[tag] = array("I", (row,))
            bisect.insort(self.sorted_tags, tag)
        else:
            rows.append(row)

    def _unpost(self, row: int, tag: str, scope_code: int) -> None:
        """Take row out of tag's posting. A short posting is rewritten now (path tags are nearly all
        unique, so their tag goes away with the record). A long one keeps the stale row, filtered out
        on reads, until stale rows are half of it: removing from a posting of 100,000 rows at every
        forget would cost O(n) each, rewriting it then costs O(1) per forget, amortised."""
        rows = self.postings.get(tag)
        if rows is None:
            return
        if self._scoped is not None and tag.startswith(FAMILY):
            self._scoped.remove(scope_code, tag)
        if len(rows) > SMALL_POSTING:
            stale = self.stale_tags.get(tag, 0) + 1
            if 2 * stale <= len(rows):
                self.stale_tags[tag] = stale
                return
            self.stale_tags[tag] = stale  # so that rows_with_tag filters (the row may still hold tag)
            kept = array("I", (r for r in self.rows_with_tag(tag) if r != row))
            del self.stale_tags[tag]
        else:
            kept = array("I", (r for r in rows if r != row))
        if kept:
            self.postings[tag] = kept
            return
        del self.postings[tag]
        self.stale_tags.pop(tag, None)
        if self._unsorted is not None:
            self._unsorted.add(tag)
        else:
            self._unsort(tag)


    # -- snapshot ------------------------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """The index as plain data for the snapshot (index_state.to_state)."""
        return to_state(self)

    @classmethod
    def from_state(cls, db_id: bytes, state: dict[str, Any], parts: SnapshotParts | None = None) -> Index:
        """Rebuild an index from to_state()'s data (index_state.load_state, which says what it refuses),
        its deferred parts read from `parts`."""
        index = cls(db_id)  # its ACL is rebuilt from the log's entries (index_snapshot.load_snapshot)
        load_state(index, state, parts)
        return index
