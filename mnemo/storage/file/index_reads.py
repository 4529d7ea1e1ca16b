"""What an index answers without changing: the record in a row (made by mnemo/_readpath.c where it is
built, else by the twins here), an id's row, the rows holding a tag or a tag prefix, the rows of the
scopes a reader may see, and the live records' counts. Index (index.py) adds the writes to these."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, cast

from ..._native import readpath
from ...chain.tree import HASH_SIZE
from ..types import Query, Rec, Version
from .index_columns import IndexData, inconsistent
from .scoped_tags import FAMILY, ScopedTags

_version, _rec = Version._make, Rec._make  # (tuples made from a tuple: cheaper than the named arguments)


class IndexReads(IndexData):
    """The reads of an index's rows: ids to rows, rows to records, tags to rows."""

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

    def get_rec(self, rec_id: str) -> Rec | None:
        row = self.row_of(rec_id)
        return None if row is None else self.rec_at(row)

    def has(self, rec_id: str) -> bool:
        return self.row_of(rec_id) is not None
    def next_ver(self, rec_id: str) -> int:
        row = self.row_of(rec_id)
        return 1 if row is None else self.cols["ver"][row] + 1

    # -- lookups by tag -------------------------------------------------------------------------------------
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

    def counts(self) -> tuple[int, int, int]:
        """(records, versions, distinct tags) of the live records."""
        versions = self.live + sum(map(len, self.older.values()))
        sets = self.tagsets
        tags = {t for code, ts in enumerate(sets.values) if ts and sets.refs[code] > 0 for t in ts}
        return self.live, versions, len(tags)


class RecordsView(Mapping[str, Rec]):
    """Read-only id -> Rec view of an index's live records."""

    def __init__(self, index: IndexReads) -> None:
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
