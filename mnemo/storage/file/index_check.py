"""Whether an index agrees with itself and with another: its tag postings and its `path:` tags per scope
against the records' own tags (checked in bulk over the columns, in C where it is built, before record by
record), and its records and grants against an index rebuilt from the log."""

from __future__ import annotations

from array import array

from ..._native import speedups
from ...errors import IntegrityError
from .index_columns import code_uses
from .index_reads import IndexReads
from .scoped_tags import FAMILY, ScopedTags


def posting_rows(tagset: array[int], rows: array[int], codes: array[int]) -> int:
    """How many distinct rows a tag's posting `rows` lists, or -1 when one of them is past the tag-set
    column `tagset` or its tag set's code is not among `codes` (those of the tag sets holding the tag,
    increasing). The pure-Python twin of the C extension's posting_rows."""
    distinct = set(rows)
    if distinct and max(distinct) >= len(tagset):
        return -1
    return len(distinct) if set(map(tagset.__getitem__, distinct)) <= set(codes) else -1


class IndexChecks(IndexReads):
    """The checks verify runs on an index (FileStore.index_differences)."""

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


    def differences(self, other: IndexReads) -> list[str]:
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
