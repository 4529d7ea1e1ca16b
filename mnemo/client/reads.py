"""The reads of records this agent may read: one record's latest version or every version, and the
records a query of tags and scopes selects, with or without their content. Each catches up with the
chain in the read's own round trip where the backend can (read_fresh)."""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import InvalidInput
from ..record import MemoryRecord, RecordInfo
from ..storage.types import Found
from .core import ClientCore, times, unavailable


def get(self: ClientCore, rec_id: str) -> MemoryRecord:
    """The latest version of a record."""
    if not isinstance(rec_id, str):
        raise InvalidInput(f"a record id must be a string, got {type(rec_id).__name__}")
    store = self._store
    record = store.read_fresh(lambda: store.get_record(rec_id, self._scopes(), self._latest_record))
    if record is None:
        raise unavailable(rec_id)
    return record


def history(self: ClientCore, rec_id: str) -> list[MemoryRecord]:
    """Every version of a record, oldest first."""
    found = self._readable(rec_id, "all", fresh=True)
    return [self._record(found.rec, v, packed) for v, packed in zip(found.rec.versions, found.packed, strict=True)]


def query(
    self: ClientCore,
    tags: Iterable[str] = (),
    any_tags: Iterable[str] = (),
    tag_prefix: str | None = None,
    scope: str | None = None,
    limit: int | None = None,
) -> list[MemoryRecord]:
    """Readable records with all of `tags`, at least one of `any_tags`, and a tag starting with
    `tag_prefix`, in scope `scope` (exact, or a `prefix*` pattern); oldest first."""
    store = self._store
    return store.read_fresh(
        lambda: store.select_records(*self._query(tags, any_tags, tag_prefix, scope, limit), self._latest_records)
    )


def tags_and_sizes(self: ClientCore, tag_prefix: str, scope: str) -> list[tuple[tuple[str, ...], int]]:
    """list_records(tag_prefix=tag_prefix, scope=scope)'s records as (tags, size of the latest version),
    oldest first: what a memory-tool directory view shows of each, without a RecordInfo (and its two
    times) made of each."""
    return [(f.rec.tags, f.rec.versions[-1].size) for f in _without_content(self, (), (), tag_prefix, scope, None)]


def list_records(
    self: ClientCore,
    tags: Iterable[str] = (),
    any_tags: Iterable[str] = (),
    tag_prefix: str | None = None,
    scope: str | None = None,
    limit: int | None = None,
) -> list[RecordInfo]:
    """Like query, without the content: none is returned (nor, on PostgreSQL, sent; the tags are
    checked against each record's put all the same)."""
    infos = []
    for found in _without_content(self, tags, any_tags, tag_prefix, scope, limit):
        r = found.rec
        latest = r.versions[-1]
        created, updated = times(r, latest)
        infos.append(RecordInfo(
            id=r.id, version=latest.ver, scope=r.scope, tags=r.tags, size=latest.size, agent_id=latest.agent,
            created_at=created, updated_at=updated, seq=latest.seq,
        ))
    return infos


def _without_content(
    self: ClientCore,
    tags: Iterable[str],
    any_tags: Iterable[str],
    tag_prefix: str | None,
    scope: str | None,
    limit: int | None,
) -> list[Found]:
    """The records a query selects, their payloads neither read nor sent: list_records's and the memory
    tool's directory views'."""
    store = self._store
    return store.read_fresh(
        lambda: store.select(*self._query(tags, any_tags, tag_prefix, scope, limit), payloads=False)
    )
