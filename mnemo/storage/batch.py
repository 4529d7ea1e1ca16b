"""A commit in the making, shared by every backend: the entries staged under the writer lock, and an
overlay of the records and ACL they change, so that reads inside a transaction see its own writes."""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from .._native import writepath
from ..acl import Acl
from ..chain.codec import SALT_SIZE, Entry, checked_put_twin, make_entry, new_tuple
from ..errors import InvalidInput
from ..validation import Limits
from .types import Query, Rec, Version

ACL_OPS = frozenset({"genesis", "grant", "revoke"})


class ChainError(ValueError):
    """An entry that is well-framed but does not follow from the chain before it."""


class Staged(NamedTuple):
    entry: Entry
    payload: bytes | None
    tags: tuple[str, ...]
    text: str | None = None  # a put's content when it is text, as the writer had it (for recall's index)


class View(Protocol):
    """What a batch reads through to: the committed state, as the backend holds it under the lock."""

    @property
    def acl(self) -> Acl: ...

    def get_rec(self, rec_id: str) -> Rec | None: ...


class Batch:
    """The entries of one commit plus their overlay. `head` is (seq, hash, ts_ns) of the last committed
    entry; staged entries continue from it."""

    def __init__(self, base: View, head: tuple[int, bytes, int], transactional: bool = False) -> None:
        # Outside a transaction an operation does all its reads before it stages its one entry, so
        # the overlay would never be read: skip building it.
        self.transactional = transactional
        self.base = base
        self.staged: list[Staged] = []
        self._recs: dict[str, Rec | None] = {}
        # Puts of new records staged but not yet in the overlay: applied when something reads it, so a
        # transaction that only adds records never builds an overlay its commit would build again.
        self._pending: list[Staged] = []
        self._acl: Acl | None = None
        self.head_seq, self.head_hash, self.head_ts = head
        self.payloads: dict[int, bytes] = {}  # seq -> payload of the overlay's staged versions
        self._looked_up: tuple[str, Rec | None] | None = None
        # The overlay's records by tag, and its tags in order (for prefixes; a tag stays when no record
        # holds it any more): built on the first read by tag, kept up to date by put and drop after it.
        self._by_tag: dict[str, set[str]] | None = None
        self._tags: list[str] = []

    @property
    def recs(self) -> dict[str, Rec | None]:
        """What this batch changed, record by record (None: forgotten), as of its last staged entry."""
        if self._pending:
            self._apply_pending()
        return self._recs

    def _apply_pending(self) -> None:
        pending, self._pending = self._pending, []
        for entry, payload, tags, _text in pending:
            self._looked_up = (entry.body["id"], None)  # a new record: version 1, no look-up
            apply_entry(self, entry, -1, 0 if payload is None else len(payload) + 4, tags)

    # the view interface apply_entry works on (the file backend's Index has the same methods)
    def get_rec(self, rec_id: str) -> Rec | None:
        recs = self.recs
        if rec_id in recs:
            return recs[rec_id]
        return self.base.get_rec(rec_id)

    def next_ver(self, rec_id: str) -> int:
        hint = self._looked_up  # a record stage() was told is new needs no look-up
        prev = hint[1] if hint is not None and hint[0] == rec_id else self.get_rec(rec_id)
        self._looked_up = (rec_id, prev)  # apply_entry puts right after: spare it a second lookup
        return 1 if prev is None else prev.latest.ver + 1

    def put(self, rec_id: str, scope: str, tags: tuple[str, ...], version: Version) -> None:
        looked_up, self._looked_up = self._looked_up, None
        prev = looked_up[1] if looked_up is not None and looked_up[0] == rec_id else self.get_rec(rec_id)
        versions = (version,) if prev is None else prev.versions + (version,)
        if self._by_tag is not None:
            self._unindex(rec_id)
            self._index(rec_id, tags)
        self._recs[rec_id] = Rec(rec_id, scope, tags, versions)

    def drop(self, rec_id: str) -> Rec | None:
        rec = self.get_rec(rec_id)
        if self._by_tag is not None:
            self._unindex(rec_id)
        self._recs[rec_id] = None
        return rec

    def _index(self, rec_id: str, tags: tuple[str, ...]) -> None:
        by_tag = self._by_tag
        assert by_tag is not None
        for tag in tags:
            ids = by_tag.get(tag)
            if ids is None:
                by_tag[tag] = ids = set()
                bisect.insort(self._tags, tag)
            ids.add(rec_id)

    def _unindex(self, rec_id: str) -> None:
        """Take the overlay's current record of this id (if any) out of the tag index."""
        by_tag = self._by_tag
        assert by_tag is not None
        old = self._recs.get(rec_id)
        if old is not None:
            for tag in old.tags:
                by_tag[tag].discard(rec_id)

    def matching(self, query: Query, admits: Callable[[str], bool]) -> list[Rec]:
        """The overlay's live records (in no order) in a scope `admits` that match the query's tag
        filters (its limit is the caller's to apply). Found through the tag index when the query names
        tags or a prefix, so that a read in a transaction of many writes does not go through them all."""
        recs = self.recs
        if not recs:
            return []
        candidates: Any = recs.values()
        if query.filters_tags:
            if self._by_tag is None:
                self._by_tag = {}
                for rec in recs.values():
                    if rec is not None:
                        self._index(rec.id, rec.tags)
            by_tag = self._by_tag
            if query.tags:
                ids: set[str] = min((by_tag.get(tag, set()) for tag in query.tags), key=len)
            elif query.any_tags or query.any_prefixes:
                ids = set().union(*(by_tag.get(tag, ()) for tag in query.any_tags))
                for prefix in query.any_prefixes:
                    ids.update(self._with_prefix(prefix))
            else:
                assert query.tag_prefix is not None
                ids = self._with_prefix(query.tag_prefix)
            candidates = [recs[rec_id] for rec_id in ids]
        return [r for r in candidates if r is not None and admits(r.scope) and query.matches(r.tags)]

    def _with_prefix(self, prefix: str) -> set[str]:
        """The overlay's records holding a tag that starts with `prefix` (its tag index is built)."""
        tags, by_tag = self._tags, self._by_tag
        assert by_tag is not None
        ids: set[str] = set()
        for i in range(bisect.bisect_left(tags, prefix), len(tags)):
            if not tags[i].startswith(prefix):
                break
            ids.update(by_tag[tags[i]])
        return ids

    def drop_many(self, rec_ids: list[str]) -> list[Rec]:
        return [rec for rec in map(self.drop, rec_ids) if rec is not None]

    @property
    def acl(self) -> Acl:
        return self._acl if self._acl is not None else self.base.acl

    def acl_for_write(self) -> Acl:
        if self._acl is None:
            self._acl = self.base.acl.copy()
        return self._acl

    def stage(
        self, op: str, agent: str, body: dict[str, Any], payload: bytes | None = None,
        tags: tuple[str, ...] = (), trusted: bool = False, new_record: bool = False, text: str | None = None,
    ) -> Entry:
        """Append one entry to the batch (seq, prev and time assigned now) and apply it to the overlay.
        `trusted`: the body's maps are already in sorted key order, so canonicalising can be skipped.
        `new_record`: a put of an id just made, which no record has (its version is 1 without a look-up;
        the commit still refuses an id that exists). `text`: a put's content when it is text (a backend
        may index it without reading the payload back)."""
        ts, seq = time.time_ns(), self.head_seq + 1
        if ts < self.head_ts:
            ts = self.head_ts
        staged = _staged(seq, ts, self.head_hash, op, agent, body, payload, tags, text) if trusted \
            else stage_twin(seq, ts, self.head_hash, op, agent, body, payload, tags, text, False)
        self._append(staged, new_record)
        return staged.entry

    def stage_new(
        self, agent: str, rec_id: str, scope: str, salt: bytes, content: Any, tags: Any, metadata: Any,
        limits: Limits,
    ) -> tuple[Staged, dict[str, Any]] | None:
        """Stage version 1 of record `rec_id` (an id just made, which no record has) from a remember's input
        as the caller gave it, checked and sealed with `salt` as codec.checked_put does, when it is the
        common input (mnemo/_writepath.c's seal_checked says which): (the staged put, the checked metadata).
        None for any other input (a memory-tool file's tags, input checked_put refuses): nothing is staged,
        and the caller takes the general path, which checks it."""
        ts, seq = time.time_ns(), self.head_seq + 1
        if ts < self.head_ts:
            ts = self.head_ts
        made: tuple[Staged, dict[str, Any]] | None
        if writepath is not None:
            made = writepath.stage_new(
                Entry, Staged, seq, ts, self.head_hash, agent, rec_id, scope, salt, content, tags, metadata,
                limits.max_content_bytes, limits.max_tag_chars, limits.max_tags, limits.max_metadata_bytes)
        else:
            made = stage_new_twin(seq, ts, self.head_hash, agent, rec_id, scope, salt, content, tags, metadata,
                                  limits)
        if made is not None:
            staged = made[0]
            if self.transactional:
                self._pending.append(staged)  # a new record: see recs
                if staged.payload is not None:
                    self.payloads[seq] = staged.payload
            self.staged.append(staged)
            self.head_seq, self.head_hash, self.head_ts = seq, staged.entry.hash, ts
        return made

    def _append(self, staged: Staged, new_record: bool) -> None:
        entry, payload = staged.entry, staged.payload
        seq = entry.seq
        if self.transactional:
            if new_record:
                self._pending.append(staged)  # nothing to check against the overlay: see recs
            else:
                apply_entry(self, entry, -1, 0 if payload is None else len(payload) + 4, staged.tags)
            if payload is not None:  # what reads of the overlay's staged versions return
                self.payloads[seq] = payload
        self.staged.append(staged)
        self.head_seq, self.head_hash, self.head_ts = seq, entry.hash, entry.ts_ns

    def staged_packed(self, version: Version) -> bytes | None:
        """The packed fields of a version staged in this batch (None if it is not one of them)."""
        payload = self.payloads.get(version.seq) if version.slot_off < 0 else None
        return None if payload is None else payload[SALT_SIZE:]


def stage_twin(
    seq: int, ts_ns: int, prev: bytes, op: str, agent: str, body: dict[str, Any], payload: bytes | None,
    tags: tuple[str, ...], text: str | None, trusted: bool = True,
) -> Staged:
    """A staged entry: the entry (make_entry; `trusted`: the body's maps are in sorted key order), its
    payload, tags and text. The pure-Python twin of mnemo/_writepath.c's staged, which makes the same
    tuples and hands them back untracked by the cyclic collector where nothing in them can form a cycle
    (a transaction stages a thousand, which the collector would otherwise go through again and again)."""
    entry = make_entry(seq, ts_ns, prev, op, agent, body, trusted)
    staged: Staged = new_tuple(Staged, (entry, payload, tags, text))
    return staged


def _staged(
    seq: int, ts_ns: int, prev: bytes, op: str, agent: str, body: dict[str, Any], payload: bytes | None,
    tags: tuple[str, ...], text: str | None,
) -> Staged:
    """stage_twin of a body in canonical form, in one call of the extension where it is built."""
    if writepath is not None:
        try:
            made: Staged = writepath.staged(Entry, Staged, seq, ts_ns, prev, op, agent, body, payload, tags, text)
            return made
        except Exception:  # a value the extension leaves to the twin (as codec._pack does)
            pass
    return stage_twin(seq, ts_ns, prev, op, agent, body, payload, tags, text)


def stage_new_twin(
    seq: int, ts_ns: int, prev: bytes, agent: str, rec_id: str, scope: str, salt: bytes, content: Any, tags: Any,
    metadata: Any, limits: Limits,
) -> tuple[Staged, dict[str, Any]] | None:
    """Batch.stage_new's staged put and metadata, or None where the input is not a plain new record's
    (checked_put_twin refuses it, or its tags make a memory-tool file). The pure-Python twin of
    mnemo/_writepath.c's stage_new, which gives the same wherever it gives anything, and None for all but
    the common input (seal_checked's)."""
    try:
        content, size, tag_tuple, path, meta, (digest, payload) = checked_put_twin(salt, content, tags, metadata,
                                                                                    limits)
    except InvalidInput:
        return None
    if path is not None:
        return None
    body = {"digest": digest, "id": rec_id, "scope": scope, "size": size, "ver": 1}
    text = content if isinstance(content, str) else None
    return stage_twin(seq, ts_ns, prev, "put", agent, body, payload, tag_tuple, text), meta


def apply_entry(
    view: Any, entry: Entry, slot_off: int, slot_len: int, tags: tuple[str, ...], entry_off: int = -1
) -> list[Rec]:
    """Apply one entry to a view (a Batch, or a backend's index); returns the records a forget dropped.
    `slot_off`/`slot_len` and `entry_off` say where the backend keeps the payload and the entry."""
    body = entry.body
    op = entry.op
    if op == "put":
        rec_id = body["id"]
        expected = view.next_ver(rec_id)
        if body["ver"] != expected:
            raise ChainError(f"put of {rec_id} version {body['ver']}, expected {expected}")
        version = Version(
            body["ver"], entry.seq, entry.ts_ns, entry.agent, body["size"], entry.hash, slot_off, slot_len,
            entry_off, len(entry.raw),
        )
        view.put(rec_id, body["scope"], tags, version)
        return []
    if op == "forget":
        dropped: list[Rec] = view.drop_many(body["ids"])
        return dropped
    if op == "grant":
        view.acl_for_write().grant(body["principal"], body["scope"], body["perms"])
    elif op == "revoke":
        view.acl_for_write().revoke(body["principal"], body["scope"], body["perms"])
    elif op == "genesis":
        raise ChainError("genesis entry after seq 0")
    return []


__all__ = ["ACL_OPS", "Batch", "ChainError", "Staged", "View", "apply_entry", "stage_new_twin", "stage_twin"]
