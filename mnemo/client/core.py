"""What every part of MnemoClient stands on: the handle's state (the storage opened, the agent, its
limits and signing key), the one permission model (what the agent may read, the checks of what it may
do), records made of what the storage found, and the frame of a write (its batch, the entry it left, a
signed checkpoint when one is due). `close` and `checkpoint` are here too, since the frame of a write
needs them; every other public member is a function of the module of its job (see mnemo/client/api.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..acl import Acl, check_agent_id, check_pattern, home_scope
from ..chain.checkpoints import sign_checkpoint
from ..chain.codec import decode_record_fields
from ..errors import IntegrityError, InvalidInput, NotFound, PermissionDenied
from ..keys import load_private_key
from ..recall.embedding import Embedder, check_embedder
from ..record import MemoryRecord, ns_to_datetime
from ..storage import open_storage
from ..storage.batch import Batch
from ..storage.contract import (
    Found,
    Payloads,
    Query,
    Rec,
    ScopeFilter,
    Storage,
    Version,
    check_durability,
    check_group_commit_wait,
)
from ..storage.records import record_of
from ..validation import Limits, check_tag_prefix, check_tags


class RecordUnavailable(NotFound, PermissionDenied):
    """No record the caller may read has this id. Raised alike for a missing id and for one in a scope
    the caller cannot read, so that nothing leaks whether it exists; catch NotFound or PermissionDenied."""


def unavailable(rec_id: str) -> RecordUnavailable:
    return RecordUnavailable(f"no record {rec_id!r} that you may read")


class ClientCore:
    """The state of an agent's handle on one database, and what every operation of it shares."""

    def __init__(
        self,
        db_path: str | os.PathLike[str],
        agent_id: str,
        *,
        durability: str = "fsync",
        readonly: bool = False,
        signing_key: Any = None,
        lock_timeout: float = 10.0,
        checkpoint_every: int | None = None,
        limits: Limits | None = None,
        group_commit_wait: float | None = None,
        embedder: Embedder | str | None = None,
    ) -> None:
        check_agent_id(agent_id, "agent_id")
        self.embedder = None if embedder is None else check_embedder(embedder)
        check_durability(durability)
        if not isinstance(lock_timeout, (int, float)) or lock_timeout < 0:
            raise InvalidInput(f"lock_timeout must be a non-negative number, got {lock_timeout!r}")
        if checkpoint_every is not None and (not isinstance(checkpoint_every, int) or checkpoint_every < 1):
            raise InvalidInput("checkpoint_every must be a positive integer or None")
        check_group_commit_wait(group_commit_wait)
        self.agent_id = agent_id
        self.home_scope = home_scope(agent_id)
        self.limits = limits or Limits()
        self._signing_key = _load_signing_key(signing_key) if signing_key is not None else None
        self._checkpoint_every = checkpoint_every
        self._since_checkpoint = 0
        self._last_entry: tuple[int, str] | None = None
        # (the ACL, its generation and owner, the agent) -> what it may read, kept until one changes
        self._readers: tuple[Acl, int, str, str, ScopeFilter] | None = None
        self._store: Storage = open_storage(
            os.fspath(db_path), agent_id, readonly=readonly, durability=durability, lock_timeout=lock_timeout,
            group_commit_wait=group_commit_wait, embedder=self.embedder,
        )
        self.path = self._store.path

    def _chain_head(self) -> tuple[int, str]:
        """The head without the admin check of `head`, for this process's own caches (the memory-tool
        server keys its quota usage on it): never to be shown to the agent."""
        seq, head = self._store.head()
        return seq, head.hex()

    # -- what this agent may do --------------------------------------------------------------------
    def _acl(self) -> Acl:
        return self._store.acl()

    def _scopes(self, requested: str | None = None) -> ScopeFilter:
        """What this agent may read now (in this thread's open transaction, with its own grants). Made
        once per state of the ACL: a grant or revoke (its generation), a new owner or another ACL object
        (a transaction's own) makes it again."""
        acl, agent, kept = self._acl(), self.agent_id, self._readers
        if kept is not None and kept[0] is acl and kept[1] == acl.generation and kept[2] == acl.owner \
                and kept[3] == agent:
            scopes = kept[4]
        else:
            generation, owner = acl.generation, acl.owner
            everything, exact, prefixes = acl.readable_filter(agent)
            scopes = ScopeFilter(everything, frozenset(exact), prefixes)
            self._readers = (acl, generation, owner, agent, scopes)
        return scopes if requested is None else scopes.narrowed(requested)

    def _readable(self, rec_id: Any, payloads: Payloads = "none", fresh: bool = False) -> Found:
        """The record, if this agent may read it; `fresh`: caught up first (refresh), in the read's own
        round trip where the backend can (read_fresh)."""
        if not isinstance(rec_id, str):
            raise InvalidInput(f"a record id must be a string, got {type(rec_id).__name__}")
        found = (self._store.read_fresh(lambda: self._store.get(rec_id, self._scopes(), payloads)) if fresh
                 else self._store.get(rec_id, self._scopes(), payloads))
        if found is None:
            raise unavailable(rec_id)
        return found

    def _require(self, acl: Acl, perm: str, scope: str) -> None:
        if not acl.allows(self.agent_id, perm, scope):
            raise PermissionDenied(f"{self.agent_id} may not {perm} in scope {scope}")

    def _require_everything(self, acl: Acl, what: str) -> None:
        """For what describes the whole chain, every scope in it: admin on `*`."""
        if not acl.allows(self.agent_id, "admin", "*"):
            raise PermissionDenied(f"{self.agent_id} may not {what}: it needs admin on *")

    def _query(
        self, tags: Iterable[str], any_tags: Iterable[str], tag_prefix: str | None, scope: str | None,
        limit: int | None,
    ) -> tuple[Query, ScopeFilter]:
        """The checked filters of a select, and the scopes this agent may read narrowed to `scope`."""
        all_tags = check_tags(tags, self.limits)
        some_tags = check_tags(any_tags, self.limits, "any_tags")
        tag_prefix = check_tag_prefix(tag_prefix)
        if scope is not None:
            check_pattern(scope, "scope")  # exact, or a `prefix*` pattern
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
            raise InvalidInput("limit must be a non-negative int or None")
        return Query(all_tags, some_tags, tag_prefix, limit), self._scopes(scope)

    # -- records of what the storage found -----------------------------------------------------------
    def _record(self, rec: Rec, version: Version, packed: bytes | memoryview) -> MemoryRecord:
        record = record_of(rec, version, packed)
        if record is None:
            raise self._unreadable(rec, version, packed)
        return record

    def _latest_record(self, found: Found) -> MemoryRecord:
        return self._record(found.rec, found.rec.latest, found.packed[0])

    def _latest_records(self, founds: list[Found]) -> list[MemoryRecord]:
        """The latest version of each record found, as _record builds it, in one loop (a query builds
        many)."""
        out = []
        for rec, packed in founds:
            v = rec.versions[-1]
            record = record_of(rec, v, packed[0])
            if record is None:
                raise self._unreadable(rec, v, packed[0])
            out.append(record)
        return out

    def _unreadable(self, rec: Rec, version: Version, packed: bytes | memoryview) -> IntegrityError:
        """The error for a payload that does not decode as three fields of the right types (where
        record_of gives None), saying what is wrong with it."""
        try:
            decode_record_fields(packed)
            why = "packed record fields have the wrong types"
        except Exception as exc:  # msgpack raises several unrelated types on garbage
            why = str(exc)
        return IntegrityError(
            f"{self._store.path}: unreadable payload of record {rec.id} version {version.ver}: {why}",
            version.slot_off if version.slot_off >= 0 else None,
        )

    # -- the frame of a write ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _writing(self, transactional: bool = False) -> Iterator[Batch]:
        with self._store.writing(transactional) as batch:
            yield batch
        self._committed(batch)
        self._checkpoint_if_due()

    def _committed(self, batch: Batch) -> None:
        """Note the last entry of a batch that has just committed (not one still open: a transaction's)."""
        if batch.staged and self._store.current_batch() is None:
            last = batch.staged[-1].entry
            self._last_entry = (last.seq, last.hash.hex())

    def _checkpoint_if_due(self) -> None:
        """After a write outside a transaction: a signed checkpoint every `checkpoint_every` entries."""
        if (
            self._checkpoint_every is not None
            and self._signing_key is not None
            and self._since_checkpoint >= self._checkpoint_every
            and self._store.current_batch() is None
        ):
            checkpoint(self)


def close(self: ClientCore) -> None:
    """Flush, write a signed checkpoint (with a signing key) and the index snapshot, release files."""
    store = self._store
    if store.closed:
        return
    if self._signing_key is not None and self._since_checkpoint and not store.readonly:
        with contextlib.suppress(Exception):
            checkpoint(self)
    store.close()


def checkpoint(self: ClientCore) -> int | None:
    """Write a signed checkpoint over the current head (with a signing key) and the index snapshot.
    Returns the checkpoint's seq, or None without a signing key."""
    self._store.check_writable()
    seq = None
    if self._signing_key is not None:
        key = self._signing_key
        with self._store.writing() as batch:
            head_seq, head_hash = self._store.head()  # what it signs: the entry just before it
            body = sign_checkpoint(key, self._store.db_id, head_seq, head_hash)
            seq = batch.stage("checkpoint", self.agent_id, body).seq
        self._since_checkpoint = 0
    if self._store.current_batch() is None:
        self._store.persist()
    return seq


def times(rec: Rec, version: Version) -> tuple[datetime, datetime]:
    """(created_at, updated_at) of a record as of `version`. One conversion for a first version (most
    records have no other): datetimes are immutable, so both fields may share it."""
    updated = ns_to_datetime(version.ts_ns)
    created_ns = rec.versions[0].ts_ns
    return (updated if created_ns == version.ts_ns else ns_to_datetime(created_ns)), updated


def _load_signing_key(key: Any) -> Any:
    if isinstance(key, Ed25519PrivateKey):
        return key
    if isinstance(key, (bytes, bytearray)) and len(key) == 32:
        return Ed25519PrivateKey.from_private_bytes(bytes(key))
    if isinstance(key, (str, os.PathLike)):
        return load_private_key(key)
    raise InvalidInput("signing_key must be an Ed25519PrivateKey, 32 raw seed bytes, or a key file path")
