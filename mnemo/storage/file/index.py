"""In-memory indexes rebuilt from the chain: id -> versions and their file locations, tag -> records,
a sorted tag list for prefix queries, and the ACL. Content and metadata are never held here.

Records live in rows of typed columns (the `array` module) rather than one object per record: a
million records then cost a few hundred bytes each instead of over a kilobyte, and a snapshot loads
with a few bulk copies instead of building millions of objects. `Rec` and `Version` tuples are made
on demand, for the records a caller actually looks at. What the rows are made of is in index_columns.py,
the index's snapshot form in index_state.py.
"""

from __future__ import annotations

import bisect
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import islice
from typing import TYPE_CHECKING, Any, cast

from ..._native import readpath, speedups
from ...acl import Acl
from ...chain.tree import HASH_SIZE
from ...errors import IntegrityError
from ..types import Query, Rec, Version
from .deferred import SnapshotParts
from .index_columns import IndexData, SortedIds, inconsistent
from .index_state import load_state, to_state
from .new_rows import NewRows, new_rows_twin
from .scoped_tags import FAMILY, ScopedTags

_version, _rec = Version._make, Rec._make  # (tuples made from a tuple: cheaper than the named arguments)

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


def posting_rows(tagset: array[int], rows: array[int], codes: array[int]) -> int:
    """How many distinct rows a tag's posting `rows` lists, or -1 when one of them is past the tag-set
    column `tagset` or its tag set's code is not among `codes` (those of the tag sets holding the tag,
    increasing). The pure-Python twin of the C extension's posting_rows."""
    distinct = set(rows)
    if distinct and max(distinct) >= len(tagset):
        return -1
    return len(distinct) if set(map(tagset.__getitem__, distinct)) <= set(codes) else -1


def code_uses(codes: bytes, n: int, table: list[int | None], refs: list[int]) -> list[tuple[int, int]]:
    """How many of the first n codes (u32) are each code: for a code the index holds (`table[code]` an
    int), those uses are added to `refs[table[code]]`; the codes it does not hold yet (None) are returned
    with their uses, in order. A code past the table, or an entry that is no index of refs, raises
    ValueError before refs changes. The pure-Python twin of the C extension's code_uses."""
    column = array("I", codes[: 4 * n])
    if len(column) < n or (n and max(column) >= len(table)):
        raise ValueError("a code past the table, or fewer codes than n")
    counted = sorted(Counter(column).items())
    for code, _k in counted:
        to = table[code]
        if to is not None and not (type(to) is int and 0 <= to < len(refs)):
            raise ValueError("a table entry that is no index of refs")
    missing = []
    for code, k in counted:
        to = table[code]
        if to is None:
            missing.append((code, k))
        else:
            refs[to] += k
    return missing


def remap_codes(codes: bytes, n: int, table: list[int | None]) -> bytes:
    """The first n codes (u32) each through the table, as u32 bytes; a code past the table, or one whose
    entry is no int below 2**32, raises ValueError. The pure-Python twin of the C extension's remap_codes."""
    column = array("I", codes[: 4 * n])
    if len(column) < n:
        raise ValueError("fewer codes than n")
    try:
        return array("I", cast("Iterator[int]", map(table.__getitem__, column))).tobytes()
    except (IndexError, TypeError, OverflowError):
        raise ValueError("a code past the table, or one whose entry is no u32") from None


class Index(IndexData):
    """The live records and their indexes. Not thread-safe on its own: rows change in place, so the
    store's index lock is held by whoever writes it and by readers that may race a writer."""

    def __len__(self) -> int:
        return self.live

    @property
    def records(self) -> RecordsView:
        """A read-only mapping id -> Rec over the live records (each Rec built when looked up)."""
        return RecordsView(self)

    # -- rows ----------------------------------------------------------------------------------------
    def row_of(self, rec_id: str) -> int | None:
        """The live row of `rec_id`, None if no live row holds it. In one call of the C extension when it
        is there (mnemo/_readpath.c's find_row), else through row_of_twin; without a snapshot's rows, a
        look in the dict."""
        if not self.base.n:
            return self.rows.get(rec_id)
        if readpath is not None:
            found: int | None = readpath.find_row(self.rows, self.base.blob, self.base.width, self.base_dead, rec_id)
            return found
        return self.row_of_twin(rec_id)

    def row_of_twin(self, rec_id: str) -> int | None:
        """row_of in Python: the twin of mnemo/_readpath.c's find_row."""
        row = self.rows.get(rec_id)
        if row is None and self.base.n:
            row = self.base.find(rec_id)
            if row in self.base_dead:
                return None
        return row

    # A snapshot's codes and rows are checked when used, not when loaded (a million range checks
    # would cost more than the rest of the open): an impossible one raises IntegrityError here. The
    # snapshot's checksum rules out accidents, so only a forged snapshot gets this far; verify names it.
    def id_at(self, row: int) -> str | None:
        """The id of a row, None if its record was forgotten."""
        nbase = self.base.n
        try:
            if row >= nbase:
                return self.extra[row - nbase]
            return None if row in self.base_dead else self.base.at(row)
        except (IndexError, UnicodeError):
            raise inconsistent(row) from None

    def tables(self) -> tuple[Any, ...]:
        """What mnemo/_readpath.c's recs_at makes records from: the columns, the entry hashes, the interned
        scopes and agents, the tag sets and the earlier versions."""
        return self.cols, self.hashes, self.scopes.values, self.agents.values, self.tagsets.values, self.older

    def rec_at(self, row: int, rec_id: str | None = None) -> Rec:
        """The record in row (whose id the caller may already know). In one call of the C extension when
        it is there (mnemo/_readpath.c's recs_at), else through rec_at_twin."""
        if rec_id is None:
            rec_id = self.id_at(row)
        if readpath is None or rec_id is None:
            return self.rec_at_twin(row, rec_id)
        rec: Rec | None = readpath.recs_at(*self.tables(), [(rec_id, row)], Rec, Version)[0]
        if rec is None:
            raise inconsistent(row)
        return rec

    def rec_at_twin(self, row: int, rec_id: str | None) -> Rec:
        """rec_at in Python: the twin of mnemo/_readpath.c's recs_at for one row."""
        c = self.cols
        h = row * HASH_SIZE
        try:
            assert rec_id is not None
            tags = self.tagsets.values[c["tagset"][row]]
            assert tags is not None
            latest = _version((
                c["ver"][row], c["seq"][row], c["ts"][row], self.agents.values[c["agent"][row]], c["size"][row],
                bytes(self.hashes[h : h + HASH_SIZE]), c["slot_off"][row], c["slot_len"][row],
                c["entry_off"][row], c["entry_len"][row],
            ))
            older = self.older.get(row)
            return _rec((rec_id, self.scopes.values[c["scope"][row]], tags, older + (latest,) if older else (latest,)))
        except (IndexError, AssertionError):
            raise inconsistent(row) from None

    def recs_at(self, hits: list[tuple[str, int]]) -> list[Rec]:
        """rec_at of each (id, row), in one call of the C extension when it is there (mnemo/_readpath.c's
        recs_at), else through recs_at_twin (a query builds many)."""
        if readpath is None:
            return self.recs_at_twin(hits)
        recs: list[Rec | None] = readpath.recs_at(*self.tables(), hits, Rec, Version)
        if None in recs:
            raise inconsistent(-1)
        return cast("list[Rec]", recs)

    def recs_at_twin(self, hits: list[tuple[str, int]]) -> list[Rec]:
        """recs_at in Python, in one loop: the twin of mnemo/_readpath.c's recs_at."""
        c = self.cols
        ver, seq, ts, agent, size = c["ver"], c["seq"], c["ts"], c["agent"], c["size"]
        slot_off, slot_len, entry_off, entry_len = c["slot_off"], c["slot_len"], c["entry_off"], c["entry_len"]
        scope, tagset = c["scope"], c["tagset"]
        hashes, scopes, agents, tagsets = self.hashes, self.scopes.values, self.agents.values, self.tagsets.values
        older, new_version, new_rec = self.older, Version._make, Rec._make
        out = []
        try:
            for rec_id, row in hits:
                h = row * HASH_SIZE
                tags = tagsets[tagset[row]]
                if tags is None:
                    raise IndexError(row)
                latest = new_version((
                    ver[row], seq[row], ts[row], agents[agent[row]], size[row], bytes(hashes[h : h + HASH_SIZE]),
                    slot_off[row], slot_len[row], entry_off[row], entry_len[row],
                ))
                before = older.get(row)
                out.append(new_rec((rec_id, scopes[scope[row]], tags, before + (latest,) if before else (latest,))))
        except IndexError:
            raise inconsistent(-1) from None
        return out

    def scope_at(self, row: int) -> str:
        try:
            scope: str = self.scopes.values[self.cols["scope"][row]]
        except IndexError:
            raise inconsistent(row) from None
        return scope

    def tags_at(self, row: int) -> tuple[str, ...]:
        try:
            tags = self.tagsets.values[self.cols["tagset"][row]]
        except IndexError:
            tags = None
        if tags is None:
            raise inconsistent(row)
        return tags

    def live_ids(self) -> Iterator[str]:
        for row in self.live_rows():
            rec_id = self.id_at(row)
            assert rec_id is not None
            yield rec_id

    # -- mutation ------------------------------------------------------------------------------------
    def get_rec(self, rec_id: str) -> Rec | None:
        row = self.row_of(rec_id)
        return None if row is None else self.rec_at(row)

    def has(self, rec_id: str) -> bool:
        return self.row_of(rec_id) is not None

    def acl_for_write(self) -> Acl:
        return self.acl

    def next_ver(self, rec_id: str) -> int:
        row = self.row_of(rec_id)
        return 1 if row is None else self.cols["ver"][row] + 1

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

    # -- lookups -------------------------------------------------------------------------------------
    def rows_with_tag(self, tag: str) -> Iterable[int]:
        """Rows of live records holding tag, each once."""
        rows = self.postings.get(tag)
        if rows is None:
            return ()
        if tag not in self.stale_tags:
            return rows
        id_at, tagset, values = self.id_at, self.cols["tagset"], self.tagsets.values
        return dict.fromkeys(r for r in rows if id_at(r) is not None and tag in values[tagset[r]])  # type: ignore[operator]

    def tags_with_prefix(self, prefix: str) -> Iterator[str]:
        i = bisect.bisect_left(self.sorted_tags, prefix)
        tags = self.sorted_tags
        while i < len(tags) and tags[i].startswith(prefix):
            yield tags[i]
            i += 1

    def scoped_tags(self) -> ScopedTags:
        """The tags of the `path:` family per scope (scoped_tags.py): built from the postings on first
        use, kept up to date by every change of a posting after that."""
        if self._scoped is None:
            scope_col, rows_with_tag = self.cols["scope"], self.rows_with_tag
            self._scoped = ScopedTags.built(
                (scope_col[row], tag) for tag in self.tags_with_prefix(FAMILY) for row in rows_with_tag(tag)
            )
        return self._scoped

    def candidate_rows(self, query: Query, scope: str | None = None) -> Iterable[int] | None:
        """Rows matching the query's tag filters, or None when no tag filter narrows the search. Given
        `scope` (exact), they may be only those of that scope; a `tag_prefix` of the `path:` family is
        then looked up among that scope's tags alone, so that its cost follows what the scope holds."""
        tags, tag_prefix = query.tags, query.tag_prefix
        if scope is not None and tag_prefix is not None and tag_prefix.startswith(FAMILY):
            return self._scoped_rows(query, scope, tag_prefix)
        if len(tags) == 1 and not query.any_tags and not query.any_prefixes and tag_prefix is None:
            return self.rows_with_tag(tags[0])  # the common case: no set needed
        result: set[int] | None = None
        for tag in sorted(tags, key=lambda t: len(self.postings.get(t, ()))):
            rows = set(self.rows_with_tag(tag))
            result = rows if result is None else result & rows
            if not result:
                return set()
        if query.any_tags or query.any_prefixes:
            union: set[int] = set()
            for tag in query.any_tags:
                union.update(self.rows_with_tag(tag))
            for prefix in query.any_prefixes:
                for tag in self.tags_with_prefix(prefix):
                    union.update(self.rows_with_tag(tag))
            result = union if result is None else result & union
        if tag_prefix is not None:
            union = set()
            for tag in self.tags_with_prefix(tag_prefix):
                union.update(self.rows_with_tag(tag))
            result = union if result is None else result & union
        return result

    def _scoped_rows(self, query: Query, scope: str, tag_prefix: str) -> Iterable[int]:
        """candidate_rows given an exact scope and a tag prefix of the family: the rows of that scope's
        tags starting with `tag_prefix` (and of other scopes holding the same tags, which the scope
        filter leaves out), those among them that match the other filters."""
        code = self.scopes.codes.get(scope)
        if code is None:
            return ()
        rows: set[int] = set()
        for tag in self.scoped_tags().with_prefix(code, tag_prefix):
            rows.update(self.rows_with_tag(tag))
        if not (query.tags or query.any_tags or query.any_prefixes):
            return rows
        tags_at = self.tags_at
        return [row for row in rows if query.matches(tags_at(row))]

    def rows_in_scopes(
        self, rows: Iterable[int] | None, scope_ok: Callable[[str], bool]
    ) -> list[tuple[str, int]]:
        """(id, row) of the live rows among `rows` (None: all) whose scope passes scope_ok, which is
        called once per distinct scope."""
        ok = {code for code, scope in enumerate(self.scopes.values) if scope_ok(scope)}
        if not ok:
            return []
        pool = self.live_rows() if rows is None else rows
        id_at, scope_col = self.id_at, self.cols["scope"]
        try:
            if len(ok) == len(self.scopes.values):
                return [(i, r) for r in pool if (i := id_at(r)) is not None]
            return [(i, r) for r in pool if scope_col[r] in ok and (i := id_at(r)) is not None]
        except IndexError:
            raise inconsistent(-1) from None

    def live_slot_offsets(self) -> set[int]:
        """Payload offsets of every version of every live record."""
        slot_off = self.cols["slot_off"]
        offsets = {slot_off[row] for row in self.live_rows()}
        offsets.update(v.slot_off for versions in self.older.values() for v in versions)
        return offsets

    def posting_differences(self) -> list[str]:
        """Whether the tag postings agree with the records' own tags: each live record is listed under
        each of its tags, and nothing else is (stale rows are allowed only where they are expected
        and filtered). A snapshot could otherwise hide a record from tag queries alone."""
        if self._postings_agree():
            return self._scoped_differences()
        try:
            want: dict[str, set[int]] = {}
            for row in self.live_rows():
                for tag in self.tags_at(row):
                    want.setdefault(tag, set()).add(row)
            have = {tag: set(self.rows_with_tag(tag)) for tag in self.postings}
        except IntegrityError as exc:
            return [str(exc)]
        have = {tag: rows for tag, rows in have.items() if rows}
        out = []
        for tag in sorted(want.keys() | have.keys()):
            missing = want.get(tag, set()) - have.get(tag, set())
            extra = have.get(tag, set()) - want.get(tag, set())
            for row in sorted(missing):
                out.append(f"record {self.id_at(row)} is missing from the index of tag {tag!r}")
            for row in sorted(extra):
                out.append(f"the index of tag {tag!r} lists row {row}, which does not hold it")
        if sorted(self.sorted_tags) != self.sorted_tags or not have.keys() <= set(self.sorted_tags):
            out.append("the sorted tag list is out of order or incomplete")
        return out + self._scoped_differences()

    def _scoped_differences(self) -> list[str]:
        """Whether the `path:` tags listed per scope, once built, are those the live records hold."""
        if self._scoped is None:
            return []
        try:
            scope_col = self.cols["scope"]
            fresh = ScopedTags.built(
                (scope_col[row], tag) for row in self.live_rows() for tag in self.tags_at(row) if tag.startswith(FAMILY)
            )
        except (IntegrityError, IndexError):
            return ["the path tags listed per scope cannot be checked against the records"]
        listed = {code: tags for code, tags in self._scoped.sorted.items() if tags}
        if fresh.more != self._scoped.more or fresh.sorted != listed:
            return ["the path tags listed per scope are not those the records hold"]
        return []

    def _postings_agree(self) -> bool:
        """posting_differences' answer when it is "none", checked in bulk: every (row, tag) a posting
        lists is a live row holding that tag, and there are as many distinct ones as the live rows hold
        tags, so the postings list exactly what they must. False when that does not hold, or when
        forgotten or stale rows make the bulk check inapplicable: the detailed comparison decides."""
        if self.stale_tags or self.base_dead or None in self.extra:
            return False
        tagset, values = self.cols["tagset"], self.tagsets.values
        holding: dict[str, array[int]] = {}  # each tag: the codes of the tag sets holding it, increasing
        for code, tags in enumerate(values):
            for tag in set(tags or ()):
                holding.setdefault(tag, array("I")).append(code)
        count = speedups.posting_rows if speedups is not None else posting_rows
        none = array("I")
        try:
            pairs = 0
            for tag, rows in self.postings.items():
                distinct = count(tagset, rows, holding.get(tag, none))
                if distinct < 0:
                    return False
                pairs += distinct
            # how many rows hold each tag set (counted in C: code_uses with no code held, so every code in
            # use comes back with its uses)
            uses = (speedups.code_uses if speedups is not None else code_uses)(
                tagset.tobytes(), len(tagset), [None] * len(values), [])
            if any(values[code] is None for code, _k in uses):
                return False
            want = sum(k * len(set(values[code] or ())) for code, k in uses)
        except (IndexError, ValueError):
            return False
        n = self.base.n + len(self.extra)
        listed = set(self.sorted_tags)
        return (
            pairs == want and len(tagset) == n and self.sorted_tags == sorted(listed)
            and len(listed) == len(self.sorted_tags) and {t for t, r in self.postings.items() if r} <= listed
        )

    def counts(self) -> tuple[int, int, int]:
        """(records, versions, distinct tags) of the live records."""
        versions = self.live + sum(map(len, self.older.values()))
        sets = self.tagsets
        tags = {t for code, ts in enumerate(sets.values) if ts and sets.refs[code] > 0 for t in ts}
        return self.live, versions, len(tags)

    def differences(self, other: Index) -> list[str]:
        """How this index differs from `other` (records and grants), one line per difference."""
        out = []
        mine, theirs = set(self.live_ids()), set(other.live_ids())
        for rec_id in sorted(mine ^ theirs):
            where = "the log" if rec_id in theirs else "the index"
            out.append(f"record {rec_id} is only in {where}")
        for rec_id in sorted(mine & theirs):
            try:
                same = self.get_rec(rec_id) == other.get_rec(rec_id)
            except IntegrityError:
                same = False
            if not same:
                out.append(f"record {rec_id} differs between the index and the log")
        if self.acl.to_state() != other.acl.to_state():
            out.append("the grants in the index differ from those in the log")
        return out


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


class RecordsView(Mapping[str, Rec]):
    """Read-only id -> Rec view of an index's live records."""

    def __init__(self, index: Index) -> None:
        self._index = index

    def __getitem__(self, rec_id: str) -> Rec:
        row = self._index.row_of(rec_id)
        if row is None:
            raise KeyError(rec_id)
        return self._index.rec_at(row)

    def __contains__(self, rec_id: object) -> bool:
        return isinstance(rec_id, str) and self._index.has(rec_id)

    def __iter__(self) -> Iterator[str]:
        return self._index.live_ids()

    def __len__(self) -> int:
        return len(self._index)
