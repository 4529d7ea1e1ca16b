"""In-memory indexes rebuilt from the chain: id -> versions and their file locations, tag -> ids,
a sorted tag list for prefix queries, and the ACL. Content and metadata are never held here.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from ..acl import Acl


class Version(NamedTuple):
    """One version of a record: its chain position and where its payload slot lies in the log."""

    ver: int
    seq: int
    ts_ns: int
    agent: str
    size: int
    hash: bytes
    slot_off: int  # -1 while staged in an open transaction
    slot_len: int


class Rec(NamedTuple):
    """A live record: its scope, latest tags, and every version oldest first. Replaced, never mutated."""

    id: str
    scope: str
    tags: tuple[str, ...]
    versions: tuple[Version, ...]

    @property
    def latest(self) -> Version:
        return self.versions[-1]


_shared: dict[Any, Any] = {}


def shared(value: Any) -> Any:
    """One object for equal scopes and agent ids: a million records mostly repeat a few of each. (Not
    for tags: those are erasable, and path tags are nearly all distinct.) Never shrinks; its size is
    bounded by the distinct scopes and agents, not by the records."""
    return _shared.setdefault(value, value)


def put_record(prev: Rec | None, rec_id: str, scope: str, tags: tuple[str, ...], version: Version) -> Rec:
    versions = (version,) if prev is None else prev.versions + (version,)
    return Rec(rec_id, shared(scope), tags, versions)


class Index:
    """The live records and their indexes. Not thread-safe on its own: the store serialises writers."""

    def __init__(self, db_id: bytes = b"", acl: Acl | None = None) -> None:
        self.db_id = db_id
        self.records: dict[str, Rec] = {}
        self.by_tag: dict[str, set[str]] = {}
        self.sorted_tags: list[str] = []
        self.forgotten: set[str] = set()
        self.acl = acl or Acl()
        self.head_seq = -1
        self.head_hash = b"\x00" * 32
        self.entries = 0

    # -- mutation ------------------------------------------------------------------------------------
    def get_rec(self, rec_id: str) -> Rec | None:
        return self.records.get(rec_id)

    def acl_for_write(self) -> Acl:
        return self.acl

    def set_record(self, rec: Rec) -> None:
        old = self.records.get(rec.id)
        if old is not None and old.tags != rec.tags:
            self._untag(rec.id, old.tags)
        if old is None or old.tags != rec.tags:
            self._tag(rec.id, rec.tags)
        self.records[rec.id] = rec

    def drop(self, rec_id: str) -> Rec | None:
        rec = self.records.pop(rec_id, None)
        if rec is not None:
            self._untag(rec_id, rec.tags)
        self.forgotten.add(rec_id)
        return rec

    def _tag(self, rec_id: str, tags: Iterable[str]) -> None:
        for tag in tags:
            ids = self.by_tag.get(tag)
            if ids is None:
                self.by_tag[tag] = {rec_id}
                bisect.insort(self.sorted_tags, tag)
            else:
                ids.add(rec_id)

    def _untag(self, rec_id: str, tags: Iterable[str]) -> None:
        for tag in tags:
            ids = self.by_tag.get(tag)
            if ids is None:
                continue
            ids.discard(rec_id)
            if not ids:
                del self.by_tag[tag]
                i = bisect.bisect_left(self.sorted_tags, tag)
                if i < len(self.sorted_tags) and self.sorted_tags[i] == tag:
                    del self.sorted_tags[i]

    # -- lookups -------------------------------------------------------------------------------------
    def tags_with_prefix(self, prefix: str) -> Iterator[str]:
        i = bisect.bisect_left(self.sorted_tags, prefix)
        tags = self.sorted_tags
        while i < len(tags) and tags[i].startswith(prefix):
            yield tags[i]
            i += 1

    def candidate_ids(
        self, tags: tuple[str, ...], any_tags: tuple[str, ...], tag_prefix: str | None
    ) -> set[str] | None:
        """Ids matching the tag filters, or None when no tag filter narrows the search."""
        result: set[str] | None = None
        for tag in sorted(tags, key=lambda t: len(self.by_tag.get(t, ()))):
            ids = self.by_tag.get(tag, set())
            result = set(ids) if result is None else result & ids
            if not result:
                return set()
        if any_tags:
            union: set[str] = set()
            for tag in any_tags:
                union |= self.by_tag.get(tag, set())
            result = union if result is None else result & union
        if tag_prefix is not None:
            union = set()
            for tag in self.tags_with_prefix(tag_prefix):
                union |= self.by_tag[tag]
            result = union if result is None else result & union
        return result

    def differences(self, other: Index) -> list[str]:
        """How this index differs from `other` (records and grants), one line per difference."""
        out = []
        for rec_id in sorted(set(self.records) ^ set(other.records)):
            where = "the log" if rec_id in other.records else "the index"
            out.append(f"record {rec_id} is only in {where}")
        for rec_id in sorted(set(self.records) & set(other.records)):
            if self.records[rec_id] != other.records[rec_id]:
                out.append(f"record {rec_id} differs between the index and the log")
        if self.acl.to_state() != other.acl.to_state():
            out.append("the grants in the index differ from those in the log")
        return out

    # -- snapshot ------------------------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        recs = [
            [r.id, r.scope, list(r.tags), [list(_version_fields(v)) for v in r.versions]]
            for r in self.records.values()
        ]
        return {
            "records": recs,
            "forgotten": sorted(self.forgotten),
            "acl": self.acl.to_state(),
            "head_seq": self.head_seq,
            "head_hash": self.head_hash,
            "entries": self.entries,
        }

    @classmethod
    def from_state(cls, db_id: bytes, state: dict[str, Any]) -> Index:
        index = cls(db_id, Acl.from_state(state["acl"]))
        make_version, make_rec = Version._make, Rec._make
        records = index.records
        by_tag = index.by_tag
        for rec_id, scope, tags, versions in state["records"]:
            for v in versions:
                v[3] = shared(v[3])  # the agent id
            records[rec_id] = make_rec(
                (rec_id, shared(scope), tuple(tags), tuple(map(make_version, versions)))
            )
            for tag in tags:
                ids = by_tag.get(tag)
                if ids is None:
                    by_tag[tag] = {rec_id}
                else:
                    ids.add(rec_id)
        index.sorted_tags = sorted(index.by_tag)
        index.forgotten = set(state["forgotten"])
        index.head_seq = state["head_seq"]
        index.head_hash = state["head_hash"]
        index.entries = state["entries"]
        return index


def _version_fields(v: Version) -> tuple[Any, ...]:
    return (v.ver, v.seq, v.ts_ns, v.agent, v.size, v.hash, v.slot_off, v.slot_len)
