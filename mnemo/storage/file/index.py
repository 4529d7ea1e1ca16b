"""In-memory indexes rebuilt from the chain: id -> versions and their file locations, tag -> records,
a sorted tag list for prefix queries, and the ACL. Content and metadata are never held here.

Records live in rows of typed columns (the `array` module) rather than one object per record: a
million records then cost a few hundred bytes each instead of over a kilobyte, and a snapshot loads
with a few bulk copies instead of building millions of objects. `Rec` and `Version` tuples are made
on demand, for the records a caller actually looks at.
"""

from __future__ import annotations

import bisect
import sys
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import islice
from typing import TYPE_CHECKING, Any, cast

from ...acl import Acl
from ...chain.tree import HASH_SIZE
from ...errors import IntegrityError
from ..types import Rec, Version

if TYPE_CHECKING:
    from .scan import ScanResult

# Postings up to this long drop a row at once; longer ones are cleaned lazily (see _unpost).
SMALL_POSTING = 64
# Up to this many tags gone in one drop_many leave the sorted tag list one by one; more, in one pass.
FEW_TAGS_GONE = 8


# Column name -> array typecode. "I" is 4 bytes and "q" 8 on every platform CPython supports.
COLUMNS = {
    "scope": "I", "tagset": "I", "agent": "I", "ver": "I", "slot_len": "I",
    "seq": "q", "ts": "q", "size": "q", "slot_off": "q", "entry_off": "q", "entry_len": "I",
}
SNAPSHOT_LAYOUT = 3
STATE_KEYS = frozenset({
    "layout", "byteorder", "rows", "id_blob", "id_width", "ids", "columns", "hashes", "older", "scopes",
    "agents", "tagset_tags", "tagset_lens", "tagset_refs", "posting_tags", "posting_lens", "posting_rows",
    "forgotten", "acl_frames", "head_seq", "head_hash", "entries",
})


class _Interned:
    """Values numbered in first-seen order, so that a row stores a 4-byte code. Scopes and agent ids
    repeat across millions of records and are never erased, so this table only grows."""

    def __init__(self, values: list[Any] | None = None) -> None:
        self.values: list[Any] = values if values is not None else []
        self.codes: dict[Any, int] = {v: i for i, v in enumerate(self.values)}

    def code(self, value: Any) -> int:
        code = self.codes.get(value)
        if code is None:
            code = self.codes[value] = len(self.values)
            self.values.append(value)
        return code


class _TagSets:
    """Distinct tag tuples, reference counted: a tag set no live record uses is freed at once, so a
    forgotten record's tags do not linger in memory (nor reach the next snapshot)."""

    def __init__(self, values: list[tuple[str, ...] | None] | None = None, refs: list[int] | None = None) -> None:
        self.values: list[tuple[str, ...] | None] = values if values is not None else [()]
        self.refs: list[int] = refs if refs is not None else [0] * len(self.values)
        self._codes: dict[tuple[str, ...], int] | None = None
        self.free: list[int] = []

    @property
    def codes(self) -> dict[tuple[str, ...], int]:
        """Tag set -> code; built on first use, as only writes need it (not an open's reads)."""
        if self._codes is None:
            self._codes = {t: i for i, t in enumerate(self.values) if t is not None}
        return self._codes

    def acquire(self, tags: tuple[str, ...], uses: int = 1) -> int:
        code = self.codes.get(tags)
        if code is None:
            if self.free:
                code = self.free.pop()
                self.values[code], self.refs[code] = tags, 0
            else:
                code = len(self.values)
                self.values.append(tags)
                self.refs.append(0)
            self.codes[tags] = code
        self.refs[code] += uses
        return code

    def release(self, code: int) -> None:
        self.refs[code] -= 1
        if self.refs[code] == 0 and code != 0:
            tags = self.values[code]
            assert tags is not None
            del self.codes[tags]
            self.values[code] = None
            self.free.append(code)


def _all_str(values: list[Any]) -> bool:
    """Whether every item of a list read from a snapshot is a str (checked by one join, in C)."""
    try:
        "".join(values)
    except TypeError:
        return False
    return True


def _inconsistent(row: int) -> IntegrityError:
    return IntegrityError(f"the index snapshot is inconsistent (row {row}); delete it and reopen, or run verify")


class SortedIds:
    """The ids of the rows a snapshot loaded: one ASCII blob of fixed-width ids in sorted order, row i
    at i * width. Looking an id up is a binary search over the blob, so opening a snapshot builds no
    dict and no string per record; only ids looked at become str objects."""

    def __init__(self, blob: bytes = b"", width: int = 0) -> None:
        if width <= 0 and blob:
            raise ValueError("sorted ids need a positive width")
        if width and len(blob) % width:
            raise ValueError("sorted ids blob is not a whole number of ids")
        self.blob, self.width = blob, width
        self.n = len(blob) // width if width else 0

    def __len__(self) -> int:
        return self.n

    def find(self, rec_id: str) -> int | None:
        w = self.width
        if len(rec_id) != w or not rec_id.isascii():
            return None
        key, blob = rec_id.encode(), self.blob
        if not self.n or key > blob[-w:]:
            return None  # the usual case for a new record: ids start with their creation time
        lo, hi = 0, self.n
        while lo < hi:
            mid = (lo + hi) // 2
            if blob[mid * w : mid * w + w] < key:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < self.n and blob[lo * w : lo * w + w] == key else None

    def at(self, row: int) -> str:
        w = self.width
        return self.blob[row * w : row * w + w].decode("ascii")

    @classmethod
    def pack(cls, ids: list[str]) -> SortedIds | None:
        """The blob for sorted `ids`, or None when they are not all ASCII of one width."""
        if not ids:
            return cls()
        width = len(ids[0])
        blob = "".join(ids)
        if width == 0 or len(blob) != width * len(ids) or not blob.isascii():
            return None
        if max(map(len, ids)) != width:  # equal total length does not mean equal widths (nor min = max)
            return None
        return cls(blob.encode("ascii"), width)


class Index:
    """The live records and their indexes. Not thread-safe on its own: rows change in place, so the
    store's index lock is held by whoever writes it and by readers that may race a writer."""

    def __init__(self, db_id: bytes = b"", acl: Acl | None = None) -> None:
        self.db_id = db_id
        self.acl = acl or Acl()
        self.head_seq = -1
        self.head_hash = b"\x00" * 32
        self.entries = 0
        self.forgotten: set[str] = set()
        # Rows 0 .. len(base)-1 came from a snapshot (their ids in `base`, forgotten ones in
        # `base_dead`); later rows have their id in `rows` and `extra`.
        self.base = SortedIds()
        self.base_dead: set[int] = set()
        self.rows: dict[str, int] = {}  # id -> row, for rows after the base
        self.extra: list[str | None] = []  # row - len(base) -> id; None once the record is forgotten
        self.live = 0
        self.cols: dict[str, array[int]] = {name: array(tc) for name, tc in COLUMNS.items()}
        self.hashes = bytearray()  # row -> latest version's entry hash, 32 bytes each
        self.older: dict[int, tuple[Version, ...]] = {}  # row -> earlier versions, for updated records
        self.scopes = _Interned()
        self.agents = _Interned()
        self.tagsets = _TagSets()
        self.postings: dict[str, array[int]] = {}  # tag -> rows (may hold stale rows, see _unpost)
        self.stale_tags: dict[str, int] = {}  # tag -> rows its posting names that no longer hold it
        self.sorted_tags: list[str] = []
        # While drop_many runs: tags gone from every record, taken out of sorted_tags in one pass at
        # its end (one at a time, each removal shifts the list: quadratic for a directory's paths).
        self._unsorted: set[str] | None = None
        # Offsets of the log frames that hold genesis, grant or revoke entries: a snapshot lists them
        # instead of holding the ACL, which is rebuilt from those entries of the log itself.
        self.acl_frames = array("q")

    def __len__(self) -> int:
        return self.live

    @property
    def records(self) -> RecordsView:
        """A read-only mapping id -> Rec over the live records (each Rec built when looked up)."""
        return RecordsView(self)

    # -- rows ----------------------------------------------------------------------------------------
    def row_of(self, rec_id: str) -> int | None:
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
            raise _inconsistent(row) from None

    def rec_at(self, row: int, rec_id: str | None = None) -> Rec:
        """The record in row (whose id the caller may already know)."""
        if rec_id is None:
            rec_id = self.id_at(row)
        c = self.cols
        h = row * HASH_SIZE
        try:
            assert rec_id is not None
            tags = self.tagsets.values[c["tagset"][row]]
            assert tags is not None
            latest = Version(
                c["ver"][row], c["seq"][row], c["ts"][row], self.agents.values[c["agent"][row]], c["size"][row],
                bytes(self.hashes[h : h + HASH_SIZE]), c["slot_off"][row], c["slot_len"][row],
                c["entry_off"][row], c["entry_len"][row],
            )
            older = self.older.get(row)
            return Rec(rec_id, self.scopes.values[c["scope"][row]], tags, older + (latest,) if older else (latest,))
        except (IndexError, AssertionError):
            raise _inconsistent(row) from None

    def scope_at(self, row: int) -> str:
        try:
            scope: str = self.scopes.values[self.cols["scope"][row]]
        except IndexError:
            raise _inconsistent(row) from None
        return scope

    def tags_at(self, row: int) -> tuple[str, ...]:
        try:
            tags = self.tagsets.values[self.cols["tagset"][row]]
        except IndexError:
            tags = None
        if tags is None:
            raise _inconsistent(row)
        return tags

    def live_rows(self) -> Iterator[int]:
        nbase, dead = self.base.n, self.base_dead
        yield from (row for row in range(nbase) if row not in dead)
        yield from (row for row, rec_id in enumerate(self.extra, nbase) if rec_id is not None)

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
        c = self.cols
        tagset = self.tagsets.acquire(tags)
        row = self.row_of(rec_id)
        if row is None:
            row = self.rows[rec_id] = self.base.n + len(self.extra)
            self.extra.append(rec_id)
            self.live += 1
            for tag in tags:
                self._post(row, tag)
            c["scope"].append(self.scopes.code(scope))
            c["tagset"].append(tagset)
            c["agent"].append(self.agents.code(version.agent))
            c["ver"].append(version.ver)
            c["slot_len"].append(version.slot_len)
            c["seq"].append(version.seq)
            c["ts"].append(version.ts_ns)
            c["size"].append(version.size)
            c["slot_off"].append(version.slot_off)
            c["entry_off"].append(version.entry_off)
            c["entry_len"].append(version.entry_len)
            self.hashes += version.hash
            return
        prev = self.rec_at(row)
        self.older[row] = prev.versions
        if prev.tags != tags:
            for tag in prev.tags:
                if tag not in tags:
                    self._unpost(row, tag)
            for tag in tags:
                if tag not in prev.tags:
                    self._post(row, tag)
        self.tagsets.release(c["tagset"][row])
        c["scope"][row] = self.scopes.code(scope)
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

    def extend_new(self, res: ScanResult) -> None:
        """Append a row per record, as `put` does for a new one, for every entry of a scan of the log
        (mnemo/storage/file/scan.py, whose rows were numbered from this index's next row). The caller
        has checked that the ids are distinct, that none is in the index, and that each is version 1."""
        ids = res.ids
        n = len(ids)
        first = self.base.n + len(self.extra)
        self.rows.update(zip(ids, range(first, first + n), strict=True))
        self.extra.extend(ids)
        self.live += n
        c = self.cols
        for name, packed in res.columns.items():
            c[name].frombytes(packed)
        scope_map = [self.scopes.code(v) for v in res.scopes]
        c["scope"].extend(map(scope_map.__getitem__, array("I", res.scope_codes)))
        agent_map = [self.agents.code(v) for v in res.agents]
        c["agent"].extend(map(agent_map.__getitem__, array("I", res.agent_codes)))
        local = array("I", res.tagset_codes)
        uses = [0] * len(res.tagsets)
        for k in local:
            uses[k] += 1
        sets = self.tagsets
        refs, acquire = sets.refs, sets.acquire
        set_map: list[int | None] = list(map(sets.codes.get, res.tagsets))  # the tag sets already held
        for i, (code, k) in enumerate(zip(set_map, uses, strict=True)):
            if code is None:
                set_map[i] = acquire(res.tagsets[i], k)
            else:
                refs[code] += k
        c["tagset"].extend(map(cast("list[int]", set_map).__getitem__, local))  # every one set above
        self.hashes += res.hashes
        # postings in row order, as `put` one by one leaves them
        rows = array("I", res.tag_rows)
        postings, at = self.postings, 0
        for tag, k in zip(res.tags, array("I", res.tag_lens), strict=True):
            posting = postings.get(tag)
            if posting is None:
                postings[tag] = rows[at:at + k]
                bisect.insort(self.sorted_tags, tag)
            else:
                posting.extend(rows[at:at + k])
            at += k

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
        self.live -= 1
        for tag in rec.tags:
            self._unpost(row, tag)
        self.tagsets.release(self.cols["tagset"][row])
        self.cols["tagset"][row] = 0
        self.older.pop(row, None)
        return rec

    def drop_many(self, rec_ids: Iterable[str]) -> list[Rec]:
        """drop() each id; the records dropped. Their tags leave the sorted tag list in one pass."""
        gone: set[str] = set()
        self._unsorted = gone
        try:
            return [rec for rec in map(self.drop, rec_ids) if rec is not None]
        finally:
            self._unsorted = None
            if len(gone) <= FEW_TAGS_GONE:
                for tag in gone:
                    self._unsort(tag)
            elif gone:
                self.sorted_tags = [t for t in self.sorted_tags if t not in gone]

    def _unsort(self, tag: str) -> None:
        i = bisect.bisect_left(self.sorted_tags, tag)
        if i < len(self.sorted_tags) and self.sorted_tags[i] == tag:
            del self.sorted_tags[i]

    def _post(self, row: int, tag: str) -> None:
        rows = self.postings.get(tag)
        if rows is None:
            self.postings[tag] = array("I", (row,))
            bisect.insort(self.sorted_tags, tag)
        else:
            rows.append(row)

    def _unpost(self, row: int, tag: str) -> None:
        """Take row out of tag's posting. A short posting is rewritten now (path tags are nearly all
        unique, so their tag goes away with the record). A long one keeps the stale row, filtered out
        on reads, until stale rows are half of it: removing from a posting of 100,000 rows at every
        forget would cost O(n) each, rewriting it then costs O(1) per forget, amortised."""
        rows = self.postings.get(tag)
        if rows is None:
            return
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

    def candidate_rows(
        self, tags: tuple[str, ...], any_tags: tuple[str, ...], tag_prefix: str | None
    ) -> Iterable[int] | None:
        """Rows matching the tag filters, or None when no tag filter narrows the search."""
        if len(tags) == 1 and not any_tags and tag_prefix is None:
            return self.rows_with_tag(tags[0])  # the common case: no set needed
        result: set[int] | None = None
        for tag in sorted(tags, key=lambda t: len(self.postings.get(t, ()))):
            rows = set(self.rows_with_tag(tag))
            result = rows if result is None else result & rows
            if not result:
                return set()
        if any_tags:
            union: set[int] = set()
            for tag in any_tags:
                union.update(self.rows_with_tag(tag))
            result = union if result is None else result & union
        if tag_prefix is not None:
            union = set()
            for tag in self.tags_with_prefix(tag_prefix):
                union.update(self.rows_with_tag(tag))
            result = union if result is None else result & union
        return result

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
            raise _inconsistent(-1) from None

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
            return []
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
        return out

    def _postings_agree(self) -> bool:
        """posting_differences' answer when it is "none", checked in bulk: every (row, tag) a posting
        lists is a live row holding that tag, and there are as many distinct ones as the live rows hold
        tags, so the postings list exactly what they must. False when that does not hold, or when
        forgotten or stale rows make the bulk check inapplicable: the detailed comparison decides."""
        if self.stale_tags or self.base_dead or None in self.extra:
            return False
        tagset, values = self.cols["tagset"], self.tagsets.values
        try:
            pairs = 0
            for tag, rows in self.postings.items():
                distinct = set(rows)
                for code in set(map(tagset.__getitem__, distinct)):
                    tags = values[code]
                    if tags is None or tag not in tags:
                        return False
                pairs += len(distinct)
            uses = Counter(tagset)
            if any(values[code] is None for code in uses):
                return False
            want = sum(k * len(set(values[code] or ())) for code, k in uses.items())
        except IndexError:
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
    def _id_order(self) -> tuple[list[int], SortedIds | None, list[str]]:
        """Live rows in id order, with their ids as a SortedIds blob (or, when the ids are not all
        ASCII of one width, as a list)."""
        base, nbase = self.base, self.base.n
        tail_ids = cast("list[str]", self.extra)  # checked below: no None
        if not self.base_dead and None not in self.extra and all(
            map(str.__lt__, tail_ids, islice(tail_ids, 1, None))
        ):
            # Ids begin with their creation time, so the rows are usually in id order already.
            packed = SortedIds.pack(tail_ids)
            if packed is not None and (
                not nbase or not tail_ids or (packed.width == base.width and tail_ids[0] > base.at(nbase - 1))
            ):
                width = base.width or packed.width
                return list(range(nbase + len(tail_ids))), SortedIds(base.blob + packed.blob, width), []
        extra = sorted((i, r) for r, i in enumerate(self.extra, nbase) if i is not None)
        if not self.base_dead:
            # The usual case: the records made since the last load sort after it (ids begin with
            # their creation time), so the base blob is reused as it is.
            tail = [i for i, _r in extra]
            packed = SortedIds.pack(tail)
            if packed is not None and (
                not nbase or not tail or (packed.width == base.width and tail[0] > base.at(nbase - 1))
            ):
                width = base.width or packed.width
                return [*range(nbase), *(r for _i, r in extra)], SortedIds(base.blob + packed.blob, width), []
        pairs = sorted([(base.at(r), r) for r in range(nbase) if r not in self.base_dead] + extra)
        ids = [i for i, _r in pairs]
        return [r for _i, r in pairs], SortedIds.pack(ids), ids

    def to_state(self) -> dict[str, Any]:
        """The index as plain data for the snapshot: live rows only, in id order, with fresh postings
        and tag sets, so nothing of a forgotten record is written."""
        try:
            return self._to_state()
        except (IndexError, AssertionError, UnicodeError):
            raise _inconsistent(-1) from None

    def _to_state(self) -> dict[str, Any]:
        order, sorted_ids, id_list = self._id_order()
        identity = len(order) == self.base.n + len(self.extra) and order == list(range(len(order)))
        cols = self.cols
        if identity:
            out_cols = {name: col.tobytes() for name, col in cols.items()}
            hashes = bytes(self.hashes)
            older = self.older
        else:
            out_cols = {name: array(col.typecode, map(col.__getitem__, order)).tobytes() for name, col in cols.items()}
            hashes = b"".join(self.hashes[r * HASH_SIZE : (r + 1) * HASH_SIZE] for r in order)
            renumber = {row: new for new, row in enumerate(order)}
            older = {renumber[row]: versions for row, versions in self.older.items()}
        # Tag sets and postings are renumbered densely from the live rows.
        tagset_col = array("I", out_cols["tagset"])
        codes: dict[int, int] = {0: 0}
        tagsets: list[tuple[str, ...]] = [()]
        for code in tagset_col:
            if code not in codes:
                codes[code] = len(tagsets)
                value = self.tagsets.values[code]
                assert value is not None
                tagsets.append(value)
        tagset_col = array("I", map(codes.__getitem__, tagset_col))
        out_cols["tagset"] = tagset_col.tobytes()
        refs = [0] * len(tagsets)
        for code in tagset_col:
            refs[code] += 1
        postings = self.postings
        if not identity or self.stale_tags:
            postings = {}
            for new, code in enumerate(tagset_col):
                for tag in tagsets[code]:
                    rows = postings.get(tag)
                    if rows is None:
                        postings[tag] = array("I", (new,))
                    else:
                        rows.append(new)
        # One array of every posting back to back, in tag order: it loads with one copy.
        posting_tags = sorted(postings)
        posting_rows = array("I")
        for tag in posting_tags:
            posting_rows.extend(postings[tag])
        return {
            "layout": SNAPSHOT_LAYOUT,
            "byteorder": sys.byteorder,
            "rows": len(order),
            "id_blob": sorted_ids.blob if sorted_ids is not None else b"",
            "id_width": sorted_ids.width if sorted_ids is not None else 0,
            "ids": [] if sorted_ids is not None else id_list,
            "columns": out_cols,
            "hashes": hashes,
            "older": [[row, [list(v) for v in versions]] for row, versions in older.items()],
            "scopes": self.scopes.values,
            "agents": self.agents.values,
            "tagset_tags": [t for ts in tagsets for t in ts],
            "tagset_lens": array("I", map(len, tagsets)).tobytes(),
            "tagset_refs": array("I", refs).tobytes(),
            "posting_tags": posting_tags,
            "posting_lens": array("I", map(len, map(postings.__getitem__, posting_tags))).tobytes(),
            "posting_rows": posting_rows.tobytes(),
            "forgotten": sorted(self.forgotten),
            "acl_frames": self.acl_frames.tobytes(),
            "head_seq": self.head_seq,
            "head_hash": self.head_hash,
            "entries": self.entries,
        }

    @classmethod
    def from_state(cls, db_id: bytes, state: dict[str, Any]) -> Index:
        """Rebuild an index from to_state()'s data. Raises (ValueError, KeyError, TypeError,
        IndexError, UnicodeError) on anything inconsistent, so a malformed snapshot is never half used."""
        if state["layout"] != SNAPSHOT_LAYOUT or state["byteorder"] != sys.byteorder:
            raise ValueError("snapshot of another layout or byte order")
        if state.keys() != STATE_KEYS:
            raise ValueError("snapshot state has missing or unknown fields")
        index = cls(db_id)  # its ACL is rebuilt from the log's entries (engine.load_snapshot)
        n = state["rows"]
        if state["id_width"]:
            index.base = SortedIds(bytes(state["id_blob"]), state["id_width"])
            if index.base.n != n or not index.base.blob.isascii():
                raise ValueError("snapshot ids do not match its rows")
        else:
            ids = state["ids"]
            if len(ids) != n or not _all_str(ids):
                raise ValueError("snapshot ids do not match its rows")
            index.extra = list(ids)
            index.rows = dict(zip(ids, range(n), strict=True))
            if len(index.rows) != n:
                raise ValueError("snapshot ids repeat")
        index.live = n
        for name, tc in COLUMNS.items():
            col = array(tc)
            col.frombytes(state["columns"][name])
            if len(col) != n:
                raise ValueError(f"snapshot column {name} has {len(col)} rows, expected {n}")
            index.cols[name] = col
        index.hashes = bytearray(state["hashes"])
        if len(index.hashes) != n * HASH_SIZE:
            raise ValueError("snapshot hashes have the wrong length")
        scopes, agents = state["scopes"], state["agents"]
        if not (_all_str(scopes) and _all_str(agents)):
            raise TypeError("snapshot scopes or agents are not strings")
        index.scopes = _Interned(list(scopes))
        index.agents = _Interned(list(agents))
        flat, lens, refs = state["tagset_tags"], array("I"), array("I")
        lens.frombytes(state["tagset_lens"])
        refs.frombytes(state["tagset_refs"])
        if not _all_str(flat) or sum(lens) != len(flat) or not lens or lens[0]:
            raise TypeError("snapshot tag sets are malformed")
        if len(refs) != len(lens) or sum(refs) != n:
            raise ValueError("snapshot tag sets and their counts disagree")
        values: list[tuple[str, ...] | None] = []
        pos = 0
        for k in lens:
            values.append(tuple(flat[pos : pos + k]))
            pos += k
        index.tagsets = _TagSets(values, refs.tolist())
        for row, versions in state["older"]:
            if not 0 <= row < n:
                raise IndexError("snapshot history names an unknown row")
            index.older[row] = tuple(Version(*v) for v in versions)
        tags = state["posting_tags"]
        lens, rows = array("I"), array("I")
        lens.frombytes(state["posting_lens"])
        rows.frombytes(state["posting_rows"])
        if len(lens) != len(tags) or lens.count(0) or sum(lens) != len(rows) or not _all_str(tags):
            raise ValueError("snapshot postings are malformed")
        postings, pos = index.postings, 0
        for tag, k in zip(tags, lens, strict=True):  # lengths checked equal above
            postings[tag] = rows[pos : pos + k]
            pos += k
        index.sorted_tags = sorted(tags)
        if len(postings) != len(tags):
            raise ValueError("snapshot posting tags repeat")
        index.forgotten = set(state["forgotten"])
        index.acl_frames.frombytes(state["acl_frames"])
        index.head_seq = state["head_seq"]
        index.head_hash = state["head_hash"]
        index.entries = state["entries"]
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
