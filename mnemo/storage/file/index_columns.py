"""What an index's rows are made of: the columns' typecodes, the interned scopes and agents, the
reference-counted tag sets, the sorted blob of ids that a snapshot loads as it is, and IndexData, which
holds them."""

from __future__ import annotations

import threading
from array import array
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, cast

from ..._native import readpath
from ...acl import Acl
from ...errors import IntegrityError
from ..types import Version
from .deferred import DeferredPart
from .scoped_tags import ScopedTags
from .text_index import TextIndex
from .vector_index import VectorIndex

# Column name -> array typecode. "I" is 4 bytes and "q" 8 on every platform CPython supports.
COLUMNS = {
    "scope": "I", "tagset": "I", "agent": "I", "ver": "I", "slot_len": "I",
    "seq": "q", "ts": "q", "size": "q", "slot_off": "q", "entry_off": "q", "entry_len": "I",
}


class Interned:
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

    def codes_of(self, values: Sequence[Any]) -> list[int]:
        """[self.code(v) for v in values]; where every value has its code already (a transaction's
        scope and agent), the look-ups run in one `map` without a call of `code` each."""
        found: list[Any] = list(map(self.codes.get, values))
        return [self.code(v) for v in values] if None in found else found


class TagSets:
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

    def acquire_many(self, many: Sequence[tuple[str, ...]]) -> list[int]:
        """[self.acquire(tags) for tags in many]: where every tag set has its code already (a transaction's
        few), the look-ups in one `map` and the uses counted in one Counter; else in one loop that calls
        acquire only for a tag set without a code yet."""
        codes, refs, acquire = self.codes, self.refs, self.acquire
        found: list[Any] = list(map(codes.get, many))
        if None not in found:
            for code, uses in Counter(found).items():
                refs[code] += uses
            return found
        out = []
        for tags in many:
            code = codes.get(tags)
            if code is None:
                code = acquire(tags)
            else:
                refs[code] += 1
            out.append(code)
        return out

    def release(self, code: int) -> None:
        self.refs[code] -= 1
        if self.refs[code] == 0 and code != 0:
            tags = self.values[code]
            assert tags is not None
            del self.codes[tags]
            self.values[code] = None
            self.free.append(code)


def all_str(values: list[Any]) -> bool:
    """Whether every item of a list read from a snapshot is a str (checked by one join, in C)."""
    try:
        "".join(values)
    except TypeError:
        return False
    return True


def inconsistent(row: int) -> IntegrityError:
    return IntegrityError(f"the index snapshot is inconsistent (row {row}); delete it and reopen, or run verify")


def find_sorted(blob: bytes, width: int, key: bytes) -> int:
    """The row of `key` in `blob`, ids of `width` bytes in sorted order, by binary search; -1 if it is not
    there. The pure-Python twin of mnemo/_readpath.c's find_sorted."""
    if width <= 0 or len(blob) % width:
        raise ValueError("find_sorted: the blob must hold whole ids of a positive width")
    n = len(blob) // width
    if len(key) != width:
        return -1
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if blob[mid * width : mid * width + width] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < n and blob[lo * width : lo * width + width] == key else -1


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
            # the usual case for a new record (ids start with their creation time): no row of the blob, and a
            # live record of such an id is one of the rows after it, which Index.row_of finds without a search,
            # so a missing one takes no search either (mnemo/_readpath.c's row_in, the C twin, says why)
            return None
        row: int = (find_sorted if readpath is None else readpath.find_sorted)(blob, w, key)
        return row if row >= 0 else None

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


class IndexData:
    """An index's rows and tables, as Index (index.py) and its snapshot form (index_state.py) see them."""

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
        self.extra_forgotten: dict[int, str] = {}  # row -> id of the rows after the base forgotten since
        # the last rebase_tail (which needs their ids to move them into the base)
        self.live = 0
        self.cols: dict[str, array[int]] = {name: array(tc) for name, tc in COLUMNS.items()}
        self.hashes = bytearray()  # row -> latest version's entry hash, 32 bytes each
        self.older: dict[int, tuple[Version, ...]] = {}  # row -> earlier versions, for updated records
        self.scopes = Interned()
        self.agents = Interned()
        self.tagsets = TagSets()
        self.postings: dict[str, array[int]] = {}  # tag -> rows (may hold stale rows, see _unpost)
        self.stale_tags: dict[str, int] = {}  # tag -> rows its posting names that no longer hold it
        self.sorted_tags: list[str] = []
        # While drop_many runs: tags gone from every record, taken out of sorted_tags in one pass at
        # its end (one at a time, each removal shifts the list: quadratic for a directory's paths).
        self._unsorted: set[str] | None = None
        # The `path:` tags per scope (scoped_tags.py), once a listing in one scope asked for them
        self._scoped: ScopedTags | None = None
        # Offsets of the log frames that hold genesis, grant or revoke entries: a snapshot lists them
        # instead of holding the ACL, which is rebuilt from those entries of the log itself.
        self.acl_frames = array("q")
        self._text = TextIndex()  # recall's index of the live records' text (text_index.py), see `text`
        self._text_part: DeferredPart[TextIndex] | None = None  # the snapshot's text part, loading
        self._text_lock = threading.Lock()
        self.text_refused: str | None = None  # why the snapshot's text part was refused (made again instead)
        # semantic recall's vectors (vector_index.py), once a store with an embedder made them or a
        # snapshot held them; kept up to date by the rows as the text index is
        self.vectors: VectorIndex | None = None

    @property
    def text(self) -> TextIndex:
        """Recall's index of the live records' text. While the snapshot's text part loads (deferred.py),
        the first to ask waits for it; a part that was refused (`text_refused` says why) leaves an index
        with every live row pending, which the next catch-up makes again from the log."""
        if self._text_part is not None:
            with self._text_lock:
                part = self._text_part
                if part is not None:
                    built, refused = part.result()
                    if built is None:
                        built = TextIndex()
                        built.added(self.live_rows())
                        self.text_refused = refused
                    self._text, self._text_part = built, None
        return self._text

    @text.setter
    def text(self, value: TextIndex) -> None:
        self._text, self._text_part = value, None

    def defer_text(self, part: DeferredPart[TextIndex]) -> None:
        """The text index is the snapshot's text part, loading in its own thread."""
        self._text_part = part

    def live_rows(self) -> Iterator[int]:
        nbase, dead, extra = self.base.n, self.base_dead, self.extra
        yield from (row for row in range(nbase) if row not in dead) if dead else range(nbase)
        if None in extra:
            yield from (row for row, rec_id in enumerate(extra, nbase) if rec_id is not None)
        else:
            yield from range(nbase, nbase + len(extra))

    def live_rows_outside(self, rows: set[int]) -> list[int]:
        """The live rows not in `rows`, in order; when every row is live, told without a set of them all
        (a verify asks with the text index's pending rows, every row of a database recall never read)."""
        if not self.base_dead and None not in self.extra:
            every = range(self.base.n + len(self.extra))
            if rows.issuperset(every):
                return []
            return [row for row in every if row not in rows]
        return sorted(set(self.live_rows()).difference(rows))
