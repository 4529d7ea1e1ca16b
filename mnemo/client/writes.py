"""The writes of records: a new memory, a new version, forgetting. Each checks its input before any
lock, its permission in the write's batch, and stages its chain entries there (docs/FORMAT.md §1)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from ..acl import check_name
from ..chain.codec import SALT_SIZE, canonical, checked_put, encode_forget_payload, seal_fields
from ..errors import Conflict, InvalidInput, PermissionDenied
from ..ids import new_id, random_bytes
from ..record import MemoryRecord, ns_to_datetime, written_record
from ..storage.batch import Batch
from ..validation import (
    MEMORY_TAG,
    PATH_TAG_PREFIX,
    check_content,
    check_ids,
    check_metadata,
    check_reason,
    check_tags,
    file_path,
)
from .core import ClientCore
from .paths import check_path_free


def remember(
    self: ClientCore,
    content: str | bytes,
    tags: Iterable[str] = (),
    metadata: dict[str, Any] | None = None,
    scope: str | None = None,
) -> MemoryRecord:
    """Store a new memory (version 1) and return it once it is committed (and durable, by mode).
    The tags `memorytool` and `path:...` make it a memory-tool file: they must pass the tool's rules,
    a path taken in the scope included (docs/MEMORY_TOOL.md §4.1)."""
    store = self._store
    store.check_writable()
    outer = store.current_batch()
    if outer is not None:  # in this thread's transaction: the common input staged in one step
        record = _stage_common(self, outer, content, tags, metadata, scope)
        if record is not None:
            return record
    # checked and hashed before any lock is taken
    content, size, tag_tuple, path, meta, prepared = checked_put(
        random_bytes(SALT_SIZE), content, tags, metadata, self.limits
    )
    scope = self.home_scope if scope is None else check_name(scope, "scope")
    if outer is not None:  # in this thread's transaction: staged in its batch, committed at its end
        self._require(outer.acl, "write", scope)
        if path is not None:
            check_path_free(self, scope, path, None)
        return _stage_put(self, outer, new_id(), 1, scope, content, size, tag_tuple, meta, prepared)
    # blind: a new record depends on nothing but the ACL, so a backend may build it without the
    # writer lock, and build it again on a newer head (its seq and hash are then the final ones).
    # A memory-tool file depends on the files of its scope too: it is built under the lock.
    blind = path is None
    while True:
        try:
            with store.writing(blind=blind) as batch:
                self._require(batch.acl, "write", scope)
                if path is not None:
                    check_path_free(self, scope, path, None)
                record = _stage_put(self, batch, new_id(), 1, scope, content, size, tag_tuple, meta, prepared)
            break
        except PermissionDenied:
            # A blind batch holds the ACL as of the last head this client saw, which may predate a
            # grant: a refusal stands only once checked again under the writer lock, caught up.
            if not blind:
                raise
            blind = False
    entry = batch.staged[-1].entry
    if entry.seq != record.seq:
        at = ns_to_datetime(entry.ts_ns)
        record = dataclasses.replace(record, seq=entry.seq, hash=entry.hash.hex(), created_at=at, updated_at=at)
    self._committed(batch)
    self._checkpoint_if_due()
    return record


def update(
    self: ClientCore,
    rec_id: str,
    content: str | bytes | None = None,
    tags: Iterable[str] | None = None,
    metadata: dict[str, Any] | None = None,
    expected_version: int | None = None,
) -> MemoryRecord:
    """Write a new version; fields left None keep their value. Conflict if expected_version differs.
    New tags meet the memory tool's rules as in `remember` (docs/MEMORY_TOOL.md §4.1)."""
    self._store.check_writable()
    new_content = None if content is None else check_content(content, self.limits)
    new_tags = None if tags is None else check_tags(tags, self.limits)
    path = None if new_tags is None else file_path(new_tags)
    new_meta = None if metadata is None else check_metadata(metadata, self.limits)
    if expected_version is not None and (
        not isinstance(expected_version, int) or isinstance(expected_version, bool)
    ):
        raise InvalidInput(f"expected_version must be an int, got {expected_version!r}")
    with self._store.writing() as batch:
        keep_some = new_content is None or new_tags is None or new_meta is None
        found = self._readable(rec_id, "latest" if keep_some else "none")
        rec = found.rec
        self._require(batch.acl, "write", rec.scope)
        current = rec.latest.ver
        if expected_version is not None and expected_version != current:
            raise Conflict(f"record {rec_id} is at version {current}, not {expected_version}")
        if path is not None and not (MEMORY_TAG in rec.tags and PATH_TAG_PREFIX + path in rec.tags):
            check_path_free(self, rec.scope, path, rec.id)  # it becomes a file, or moves
        if keep_some:
            old = self._record(rec, rec.latest, found.packed[0])
            new_content = new_content or (old.content, rec.latest.size)
            # Stored fields are canonical already; sorting again only guards a hand-made log.
            new_tags = tuple(sorted(old.tags)) if new_tags is None else new_tags
            new_meta = canonical(old.metadata) if new_meta is None else new_meta
        assert new_content is not None and new_tags is not None and new_meta is not None
        body_content, size = new_content
        record = _stage_put(
            self, batch, rec.id, current + 1, rec.scope, body_content, size, new_tags, new_meta,
            created_ns=rec.versions[0].ts_ns,
        )
    self._committed(batch)
    self._checkpoint_if_due()
    return record


def forget(self: ClientCore, ids: str | Iterable[str], reason: str | None = None) -> int:
    """Forget records: every version's content, tags and metadata are erased before this returns."""
    self._store.check_writable()
    id_list = check_ids(ids)
    reason = check_reason(reason)
    with self._writing() as batch:
        for rec_id in id_list:
            rec = self._readable(rec_id).rec
            self._require(batch.acl, "forget", rec.scope)
        return _stage_forget(self, batch, id_list, reason)


def forget_where(
    self: ClientCore,
    tags: Iterable[str] = (),
    tag_prefix: str | None = None,
    scope: str | None = None,
    reason: str | None = None,
) -> int:
    """Forget every readable record matching the filters; PermissionDenied (nothing forgotten) if
    any of them is in a scope where this agent may not forget."""
    self._store.check_writable()
    reason = check_reason(reason)
    if isinstance(tags, str) or (not tags and tag_prefix is None and scope is None):
        # An empty filter would match every readable record: never do that by accident.
        raise InvalidInput("forget_where needs tags, a tag_prefix or a scope to select what to forget")
    with self._writing() as batch:
        query, scopes = self._query(tags, (), tag_prefix, scope, None)
        recs = [found.rec for found in self._store.select(query, scopes, payloads=False)]
        for rec in recs:
            self._require(batch.acl, "forget", rec.scope)
        return _stage_forget(self, batch, [r.id for r in recs], reason)


def _stage_put(
    self: ClientCore, batch: Batch, rec_id: str, ver: int, scope: str, content: str | bytes, size: int,
    tags: tuple[str, ...], metadata: dict[str, Any], prepared: tuple[bytes, bytes] | None = None,
    created_ns: int = 0,
) -> MemoryRecord:
    """Stage a put. `tags` and `metadata` are in canonical form (as check_tags and check_metadata
    return them), so they are packed and returned without another pass."""
    digest, payload = prepared or _prepare_payload(content, tags, metadata)
    # Keys in sorted order, scalar values: the entry needs no canonicalising pass.
    body = {"digest": digest, "id": rec_id, "scope": scope, "size": size, "ver": ver}
    entry = batch.stage("put", self.agent_id, body, payload, tags, True, ver == 1,
                        content if isinstance(content, str) else None)  # (trusted, new_record, text)
    self._since_checkpoint += 1
    return written_record(rec_id, ver, content, tags, metadata, scope, self.agent_id, created_ns, entry.ts_ns,
                          entry.seq, entry.hash)


def _stage_common(
    self: ClientCore, batch: Batch, content: Any, tags: Any, metadata: Any, scope: str | None
) -> MemoryRecord | None:
    """remember's put staged in this thread's open batch in one step (Batch.stage_new), where its input is
    the common one and the write is allowed; None otherwise, nothing staged: remember's general path then
    checks the input, the scope and the permission in its own order and says what is wrong."""
    if scope is None:
        scope = self.home_scope
    else:
        try:
            scope = check_name(scope, "scope")
        except InvalidInput:
            return None
    agent = self.agent_id
    # (a client's agent id is a checked name: Acl.allows lets it write its home scope without a look)
    if scope != self.home_scope and not batch.acl.allows(agent, "write", scope):
        return None
    rec_id, salt = new_id(), random_bytes(SALT_SIZE)
    made = batch.stage_new(agent, rec_id, scope, salt, content, tags, metadata, self.limits)
    if made is None:
        return None
    staged, meta = made
    entry = staged.entry
    self._since_checkpoint += 1
    return written_record(rec_id, 1, content, staged.tags, meta, scope, agent, 0, entry.ts_ns, entry.seq, entry.hash)


def _stage_forget(self: ClientCore, batch: Batch, ids: list[str], reason: str | None) -> int:
    if not ids:
        return 0
    payload = None if reason is None else encode_forget_payload(reason)
    batch.stage("forget", self.agent_id, {"ids": ids}, payload)
    self._since_checkpoint += 1
    return len(ids)


def _prepare_payload(content: str | bytes, tags: tuple[str, ...], metadata: dict[str, Any]) -> tuple[bytes, bytes]:
    """(digest, payload) of a put: a fresh salt, the packed fields, and the commitment to them. Tags
    and metadata are in canonical form (check_tags, check_metadata), so packing needs no sorting."""
    return seal_fields(random_bytes(SALT_SIZE), content, tags, metadata)
