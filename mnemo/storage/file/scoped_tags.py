"""The tags of one family (`path:`, the memory tool's) listed per scope, in order: what makes a listing by
tag prefix in one scope cost what that scope holds, not what every scope holds.

The index's sorted tag list is one for all scopes: a `view /memories` of a server for scope A would walk
the `path:/memories/...` tags of every scope, then leave out the other scopes' records row by row. This
keeps, for each scope, its distinct tags of the family in order, and how many live records of the scope
hold each (a tag leaves a scope's list with the last of them). It is derived from the postings: built from
them on first use, then kept up to date by each change of a posting (Index._post, _unpost, extend_new).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

from ...validation import PATH_TAG_PREFIX

FAMILY = PATH_TAG_PREFIX
"""The tags listed per scope: those starting with this."""


class ScopedTags:
    """Scope code -> its distinct tags starting with FAMILY, sorted; and, for the rare tag that more than
    one live row of a scope holds, how many more. (A count per tag would cost a tuple and a dict entry
    for every file, when a path names one file of its scope but where the client API made more.)"""

    def __init__(self) -> None:
        self.sorted: dict[int, list[str]] = {}
        self.more: dict[tuple[int, str], int] = {}  # (scope code, tag) -> rows holding it beyond the first
        # While a drop of many rows runs: the tags gone from a scope, taken out of its list in one pass at
        # its end (one at a time, each removal shifts the list: quadratic for a directory's paths).
        self._gone: dict[int, set[str]] | None = None

    @classmethod
    def built(cls, pairs: Iterable[tuple[int, str]]) -> ScopedTags:
        """From (scope code, tag) of every live row's tags of the family, one pair per row holding it."""
        made = cls()
        counts: dict[tuple[int, str], int] = {}
        for key in pairs:
            counts[key] = counts.get(key, 0) + 1
        for (code, tag), k in counts.items():
            made.sorted.setdefault(code, []).append(tag)
            if k > 1:
                made.more[(code, tag)] = k - 1
        for tags in made.sorted.values():
            tags.sort()
        return made

    def count(self, code: int, tag: str) -> int:
        """How many live rows of scope `code` hold `tag`."""
        gone = self._gone.get(code, ()) if self._gone is not None else ()
        if tag in gone or not _holds(self.sorted.get(code, []), tag):
            return 0
        return 1 + self.more.get((code, tag), 0)

    def add(self, code: int, tag: str) -> None:
        """One more live row of scope `code` holds `tag` (of the family)."""
        gone = self._gone.get(code) if self._gone is not None else None
        if gone is not None and tag in gone:
            gone.discard(tag)  # back before the pass that would take it out: it never left the list
            return
        tags = self.sorted.setdefault(code, [])
        i = bisect.bisect_left(tags, tag)
        if i < len(tags) and tags[i] == tag:
            key = (code, tag)
            self.more[key] = self.more.get(key, 0) + 1
        else:
            tags.insert(i, tag)

    def remove(self, code: int, tag: str) -> None:
        """One live row of scope `code` that held `tag` (of the family) no longer does."""
        key = (code, tag)
        more = self.more.get(key)
        if more is not None:
            if more > 1:
                self.more[key] = more - 1
            else:
                del self.more[key]
            return
        if self._gone is not None:
            self._gone.setdefault(code, set()).add(tag)
            return
        tags = self.sorted[code]
        del tags[bisect.bisect_left(tags, tag)]

    def begin_many(self) -> None:
        """Removals to come are applied in one pass per scope, by end_many."""
        self._gone = {}

    def end_many(self) -> None:
        gone, self._gone = self._gone, None
        for code, tags in (gone or {}).items():
            if tags:
                self.sorted[code] = [t for t in self.sorted[code] if t not in tags]

    def with_prefix(self, code: int, prefix: str) -> Iterator[str]:
        """The tags of scope `code` starting with `prefix` (itself starting with FAMILY), in order."""
        tags = self.sorted.get(code, [])
        i = bisect.bisect_left(tags, prefix)
        while i < len(tags) and tags[i].startswith(prefix):
            yield tags[i]
            i += 1


def _holds(tags: list[str], tag: str) -> bool:
    i = bisect.bisect_left(tags, tag)
    return i < len(tags) and tags[i] == tag
