"""MnemoClient: the one public API. It checks input and permissions, builds chain entries and hands
them to a storage backend through the storage contract (mnemo/storage/contract.py); it never touches
files or tables itself.

Longer than a module should be, for a reason: it is one class whose public methods are the API users
read top to bottom (docs/API.md); each method is a few checks over one call below, and splitting the
class would scatter one permission model over several files."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import IO, Any, NamedTuple

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from .acl import PERMISSIONS, Acl, check_agent_id, check_name, check_pattern, home_scope
from .audit import export_audit, load_private_key, load_public_key
from .chain.codec import (
    SALT_SIZE,
    Entry,
    canonical,
    checked_put,
    checkpoint_message,
    decode_record_fields,
    encode_forget_payload,
    seal_fields,
)
from .errors import Closed, Conflict, IntegrityError, InvalidInput, NotFound, PermissionDenied
from .ids import new_id, random_bytes
from .recall.analysis import first_lines, matching_lines
from .recall.embedding import Embedder, check_embedder, check_embeddings, check_mode
from .recall.query import Query as RecallQuery
from .recall.query import parse as parse_recall_query
from .record import (
    MemoryRecord,
    Recalled,
    RecordInfo,
    ScopeReport,
    VerifyReport,
    make_memory_record,
    ns_to_datetime,
    written_record,
)
from .storage import open_storage
from .storage.batch import Batch
from .storage.chain_copy import chain_of, copy_mode, write_chain
from .storage.contract import (
    Found,
    Payloads,
    Progress,
    Query,
    Rec,
    ScopeFilter,
    Storage,
    Version,
    check_durability,
    check_group_commit_wait,
)
from .storage.recall import Hit
from .storage.records import record_of
from .validation import (
    MEMORY_TAG,
    PATH_IS_DIRECTORY,
    PATH_TAG_PREFIX,
    PATH_TAKEN,
    PATH_UNDER_FILE,
    Limits,
    check_content,
    check_ids,
    check_metadata,
    check_reason,
    check_tag_prefix,
    check_tags,
    file_path,
    path_ancestors,
    path_problem,
)

MAX_RECALL = 1000
"""The most results one recall returns."""

class RecordUnavailable(NotFound, PermissionDenied):
    """No record the caller may read has this id. Raised alike for a missing id and for one in a scope
    the caller cannot read, so that nothing leaks whether it exists; catch NotFound or PermissionDenied."""




def _unavailable(rec_id: str) -> RecordUnavailable:
    return RecordUnavailable(f"no record {rec_id!r} that you may read")


class ScopeUsage(NamedTuple):
    """What the live records with one tag hold in one scope (see MnemoClient.scope_usage)."""

    records: int
    latest_bytes: int  # the sizes of their latest versions
    version_bytes: int  # the sizes of all their versions, the latest included


class PathUse(NamedTuple):
    """What holds a memory-tool path in one scope, whoever may read it (see MnemoClient.path_use)."""

    file: bool  # a file is at the path
    beneath: bool  # a file is beneath it: the path is a directory
    above: tuple[str, ...]  # the paths of files above it, nearest the root first


class MnemoClient:
    """An agent's handle on one Mnemo database. Thread-safe; several clients and processes may share a db."""

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

    # -- context management ----------------------------------------------------------------------------
    def __enter__(self) -> MnemoClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Flush, write a signed checkpoint (with a signing key) and the index snapshot, release files."""
        store = self._store
        if store.closed:
            return
        if self._signing_key is not None and self._since_checkpoint and not store.readonly:
            with contextlib.suppress(Exception):
                self.checkpoint()
        store.close()

    @property
    def closed(self) -> bool:
        return self._store.closed

    @property
    def readonly(self) -> bool:
        return self._store.readonly

    @property
    def db_id(self) -> str:
        return self._store.db_id.hex()

    @property
    def recovery(self) -> list[str]:
        """What opening the database repaired (a torn tail cut, an erasure completed), in order."""
        return list(self._store.recovery)

    @property
    def head(self) -> tuple[int, str]:
        """(seq, hex hash) of the chain's last entry, to keep for `verify(expect_head=...)`. Needs admin
        on `*`: the head counts every entry, in scopes this agent cannot read too."""
        self._store.refresh()
        self._require_everything(self._acl(), "see the chain's head")
        seq, head = self._store.head()
        return seq, head.hex()

    def tree_head(self) -> tuple[int, bytes]:
        """(size, root) of the Merkle tree over the chain's entries (docs/TRANSPARENCY.md): what a
        checkpoint note signs. Needs admin on `*`, as `head` does."""
        self._store.refresh()
        self._require_everything(self._acl(), "see the chain's tree head")
        return self._store.tree_head()

    def _chain_head(self) -> tuple[int, str]:
        """The head without the admin check of `head`, for this process's own caches (the memory-tool
        server keys its quota usage on it): never to be shown to the agent."""
        seq, head = self._store.head()
        return seq, head.hex()

    # -- internals ---------------------------------------------------------------------------------
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
            raise _unavailable(rec_id)
        return found

    def _require(self, acl: Acl, perm: str, scope: str) -> None:
        if not acl.allows(self.agent_id, perm, scope):
            raise PermissionDenied(f"{self.agent_id} may not {perm} in scope {scope}")

    def _require_everything(self, acl: Acl, what: str) -> None:
        """For what describes the whole chain, every scope in it: admin on `*`."""
        if not acl.allows(self.agent_id, "admin", "*"):
            raise PermissionDenied(f"{self.agent_id} may not {what}: it needs admin on *")

    def check_permission(self, perm: str, scope: str) -> None:
        """Raise PermissionDenied unless this agent holds `perm` in `scope` (as the memory tool needs)."""
        if perm not in PERMISSIONS:
            raise InvalidInput(f"unknown permission {perm!r}; expected one of {', '.join(PERMISSIONS)}")
        check_name(scope, "scope")
        self._store.refresh()
        self._require(self._acl(), perm, scope)

    def _record(self, rec: Rec, version: Version, packed: bytes | memoryview) -> MemoryRecord:
        try:
            content, tags, metadata = decode_record_fields(packed)
        except Exception as exc:  # msgpack raises several unrelated types on garbage
            raise IntegrityError(
                f"{self._store.path}: unreadable payload of record {rec.id} version {version.ver}: {exc}",
                version.slot_off if version.slot_off >= 0 else None,
            ) from None
        created, updated = _times(rec, version)
        return make_memory_record(
            rec.id, version.ver, content, tags, metadata, rec.scope, version.agent, created, updated,
            version.seq, version.hash.hex(),
        )

    def _latest_record(self, found: Found) -> MemoryRecord:
        return self._record(found.rec, found.rec.latest, found.packed[0])

    def _latest_records(self, founds: list[Found]) -> list[MemoryRecord]:
        """The latest version of each record found, as _record builds it, in one loop (a query builds
        many). A payload that does not decode as three fields of the right types goes to _record,
        which says what is wrong with it."""
        out = []
        for rec, packed in founds:
            v = rec.versions[-1]
            record = record_of(rec, v, packed[0])
            out.append(record if record is not None else self._record(rec, v, packed[0]))
        return out

    def _stage_put(
        self, batch: Batch, rec_id: str, ver: int, scope: str, content: str | bytes, size: int,
        tags: tuple[str, ...], metadata: dict[str, Any], prepared: tuple[bytes, bytes] | None = None,
        created_ns: int = 0,
    ) -> MemoryRecord:
        """Stage a put. `tags` and `metadata` are in canonical form (as check_tags and check_metadata
        return them), so they are packed and returned without another pass."""
        digest, payload = prepared or _prepare_payload(content, tags, metadata)
        # Keys in sorted order, scalar values: the entry needs no canonicalising pass.
        body = {"digest": digest, "id": rec_id, "scope": scope, "size": size, "ver": ver}
        entry = batch.stage("put", self.agent_id, body, payload, tags, trusted=True, new_record=ver == 1,
                            text=content if isinstance(content, str) else None)
        self._since_checkpoint += 1
        return written_record(rec_id, ver, content, tags, metadata, scope, self.agent_id, created_ns, entry.ts_ns,
                              entry.seq, entry.hash)

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

    @property
    def last_entry(self) -> tuple[int, str] | None:
        """(seq, hex hash) of the last chain entry this client committed, or None: for the CLI and logs
        to name the entry a write made (unlike `head`, it tells nothing of other agents' writes)."""
        return self._last_entry

    def _checkpoint_if_due(self) -> None:
        """After a write outside a transaction: a signed checkpoint every `checkpoint_every` entries."""
        if (
            self._checkpoint_every is not None
            and self._signing_key is not None
            and self._since_checkpoint >= self._checkpoint_every
            and self._store.current_batch() is None
        ):
            self.checkpoint()

    # -- writes ------------------------------------------------------------------------------------
    def remember(
        self,
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
        # checked and hashed before any lock is taken
        content, size, tag_tuple, path, meta, prepared = checked_put(
            random_bytes(SALT_SIZE), content, tags, metadata, self.limits
        )
        scope = self.home_scope if scope is None else check_name(scope, "scope")
        outer = store.current_batch()
        if outer is not None:  # in this thread's transaction: staged in its batch, committed at its end
            self._require(outer.acl, "write", scope)
            if path is not None:
                self._check_path_free(scope, path, None)
            return self._stage_put(outer, new_id(), 1, scope, content, size, tag_tuple, meta, prepared)
        # blind: a new record depends on nothing but the ACL, so a backend may build it without the
        # writer lock, and build it again on a newer head (its seq and hash are then the final ones).
        # A memory-tool file depends on the files of its scope too: it is built under the lock.
        blind = path is None
        while True:
            try:
                with store.writing(blind=blind) as batch:
                    self._require(batch.acl, "write", scope)
                    if path is not None:
                        self._check_path_free(scope, path, None)
                    record = self._stage_put(batch, new_id(), 1, scope, content, size, tag_tuple, meta, prepared)
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
        self,
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
                self._check_path_free(rec.scope, path, rec.id)  # it becomes a file, or moves
            if keep_some:
                old = self._record(rec, rec.latest, found.packed[0])
                new_content = new_content or (old.content, rec.latest.size)
                # Stored fields are canonical already; sorting again only guards a hand-made log.
                new_tags = tuple(sorted(old.tags)) if new_tags is None else new_tags
                new_meta = canonical(old.metadata) if new_meta is None else new_meta
            assert new_content is not None and new_tags is not None and new_meta is not None
            body_content, size = new_content
            record = self._stage_put(
                batch, rec.id, current + 1, rec.scope, body_content, size, new_tags, new_meta,
                created_ns=rec.versions[0].ts_ns,
            )
        self._committed(batch)
        self._checkpoint_if_due()
        return record

    def _check_path_free(self, scope: str, path: str, own_id: str | None) -> None:
        """Refuse to make a record (other than `own_id`) the memory-tool file at `path` in `scope` while
        a file of the scope, readable by this agent or not, is at that path, beneath it or at a path
        above it: a path names at most one file, and never a file and a directory at once. Called in
        the write's batch, after its `write` check (so only a writer of the scope learns that a path is
        taken, as the memory tool's own create tells it), under the writer lock: no other write comes
        between the check and the commit. It names no file the caller may not already name."""
        use = self._path_use(scope, path, own_id)
        if use.file:
            raise InvalidInput(PATH_TAKEN.format(scope=scope, path=path))
        if use.above:
            raise InvalidInput(PATH_UNDER_FILE.format(scope=scope, path=path, ancestor=use.above[0]))
        if use.beneath:
            raise InvalidInput(PATH_IS_DIRECTORY.format(scope=scope, path=path))

    def path_use(self, scope: str, path: str) -> PathUse:
        """What holds the memory-tool path `path` (canonical, docs/MEMORY_TOOL.md §4) in exactly `scope`:
        a file at it, files beneath it, a file above it, whether or not this agent may read them. Needs
        `write` in `scope`, as scope_has does, and reveals no more: a memory-tool server asks it before
        a create, which `remember` checks again in the same transaction."""
        check_name(scope, "scope")
        if not isinstance(path, str) or path_problem(path) is not None:
            raise InvalidInput(f"path must be a canonical memory-tool path, got {path!r}")
        self._store.refresh()
        self._require(self._acl(), "write", scope)
        return self._path_use(scope, path, None)

    def _path_use(self, scope: str, path: str, own_id: str | None) -> PathUse:
        """The files of `scope` (but `own_id`) at, beneath and above `path`, in one look-up (one statement
        on PostgreSQL); no limit: records that are no file are filtered here."""
        above = path_ancestors(path)
        beneath = PATH_TAG_PREFIX + path + "/"
        query = Query(any_tags=tuple(PATH_TAG_PREFIX + p for p in [*above, path]), any_prefixes=(beneath,))
        found = self._store.select(query, ScopeFilter(True, requested=scope), payloads=False)
        held = {tag for f in found if f.rec.id != own_id and MEMORY_TAG in f.rec.tags for tag in f.rec.tags}
        return PathUse(
            PATH_TAG_PREFIX + path in held,
            any(tag.startswith(beneath) for tag in held),
            tuple(a for a in above if PATH_TAG_PREFIX + a in held),
        )

    def forget(self, ids: str | Iterable[str], reason: str | None = None) -> int:
        """Forget records: every version's content, tags and metadata are erased before this returns."""
        self._store.check_writable()
        id_list = check_ids(ids)
        reason = check_reason(reason)
        with self._writing() as batch:
            for rec_id in id_list:
                rec = self._readable(rec_id).rec
                self._require(batch.acl, "forget", rec.scope)
            return self._stage_forget(batch, id_list, reason)

    def _stage_forget(self, batch: Batch, ids: list[str], reason: str | None) -> int:
        if not ids:
            return 0
        payload = None if reason is None else encode_forget_payload(reason)
        batch.stage("forget", self.agent_id, {"ids": ids}, payload)
        self._since_checkpoint += 1
        return len(ids)

    def forget_where(
        self,
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
            return self._stage_forget(batch, [r.id for r in recs], reason)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[MnemoClient]:
        """Every write inside commits atomically as one frame, or none does (on an exception).
        Holds the writer lock throughout; reads inside see the transaction's own writes."""
        self._store.check_writable()
        with self._writing(transactional=True):
            yield self

    # -- access control ------------------------------------------------------------------------------
    def grant(self, principal: str, scope: str, perms: Iterable[str]) -> None:
        """Give `principal` permissions on a scope or `prefix*` pattern; needs admin covering it."""
        self._store.check_writable()
        check_agent_id(principal, "principal")
        perm_list = self._check_perms(perms)
        check_pattern(scope, "scope")
        with self._writing() as batch:
            if not batch.acl.may_administer(self.agent_id, scope):
                raise PermissionDenied(f"{self.agent_id} may not admin in scope {scope}")
            batch.stage("grant", self.agent_id, {"perms": perm_list, "principal": principal, "scope": scope})

    def revoke(self, principal: str, scope: str, perms: Iterable[str] | None = None) -> None:
        """Withdraw permissions granted on exactly this scope pattern (all of them when perms is None)."""
        self._store.check_writable()
        check_agent_id(principal, "principal")
        check_pattern(scope, "scope")
        perm_list = None if perms is None else self._check_perms(perms)
        with self._writing() as batch:
            if not batch.acl.may_administer(self.agent_id, scope):
                raise PermissionDenied(f"{self.agent_id} may not admin in scope {scope}")
            held = batch.acl.held(principal, scope)
            to_revoke = sorted(held) if perm_list is None else perm_list
            if not held or not set(to_revoke) & set(held):
                raise InvalidInput(f"{principal} holds no such grant on scope {scope}")
            batch.stage("revoke", self.agent_id, {"perms": to_revoke, "principal": principal, "scope": scope})

    def permissions(self, agent_id: str | None = None) -> dict[str, tuple[str, ...]]:
        """Every scope pattern the agent (default: this one) holds permissions on, and which."""
        if agent_id is not None:
            check_agent_id(agent_id, "agent_id")
        self._store.refresh()
        acl = self._acl()
        if agent_id is not None and agent_id != self.agent_id:
            if not acl.allows(self.agent_id, "admin", "*"):
                raise PermissionDenied(f"{self.agent_id} may not see another agent's permissions: it needs admin on *")
            return acl.effective(agent_id)
        return acl.effective(self.agent_id)

    def grants(self) -> dict[str, dict[str, tuple[str, ...]]]:
        """Every grant in force, as the chain's grant and revoke entries left them: principal -> scope
        pattern -> the permissions granted there, principals and patterns sorted. The owner's `*` and each
        agent's home scope are not grants (`permissions` shows them). Needs admin on `*`: the grants name
        agents and scopes this agent may not otherwise see."""
        self._store.refresh()
        acl = self._acl()
        self._require_everything(acl, "see every grant")
        return {
            principal: {pattern: tuple(sorted(perms)) for pattern, perms in sorted(held.items())}
            for principal, held in sorted(acl.grants.items())
        }

    def log(self, since: int = 0, limit: int | None = None, op: str | None = None) -> list[Entry]:
        """The chain's entries from seq `since` on, oldest first, at most `limit` of them (None: all), only
        those of kind `op` if given ("put", "forget", "checkpoint", ...), as `mnemo log` shows them: each
        holds ids, scopes and digests, never content. Needs admin on `*`: the chain names the ids and
        scopes of every record. Damage in what is read raises IntegrityError; before `since` the chain is read
        only as far as finding where to start (`verify` checks the whole of it and gives the full report)."""
        if not isinstance(since, int) or isinstance(since, bool) or since < 0:
            raise InvalidInput(f"since must be a non-negative int, got {since!r}")
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
            raise InvalidInput(f"limit must be a non-negative int or None, got {limit!r}")
        if op is not None and not isinstance(op, str):
            raise InvalidInput(f"op must be a string or None, got {op!r}")
        self._store.refresh()
        self._require_everything(self._acl(), "read the chain")
        entries: list[Entry] = []
        if limit == 0:
            return entries
        for item in self._store.log(since):
            if op is not None and item.entry.op != op:
                continue
            entries.append(item.entry)
            if len(entries) == limit:
                break
        return entries

    @staticmethod
    def _check_perms(perms: Iterable[str]) -> list[str]:
        if isinstance(perms, str) or not isinstance(perms, Iterable):
            raise InvalidInput("perms must be a list of permission names")
        out = sorted(set(perms))
        bad = [p for p in out if p not in PERMISSIONS]
        if bad or not out:
            raise InvalidInput(f"perms must be a non-empty subset of {', '.join(PERMISSIONS)}, got {perms!r}")
        return out

    # -- reads ---------------------------------------------------------------------------------------
    def get(self, rec_id: str) -> MemoryRecord:
        """The latest version of a record."""
        if not isinstance(rec_id, str):
            raise InvalidInput(f"a record id must be a string, got {type(rec_id).__name__}")
        store = self._store
        record = store.read_fresh(lambda: store.get_record(rec_id, self._scopes(), self._latest_record))
        if record is None:
            raise _unavailable(rec_id)
        return record

    def history(self, rec_id: str) -> list[MemoryRecord]:
        """Every version of a record, oldest first."""
        found = self._readable(rec_id, "all", fresh=True)
        return [self._record(found.rec, v, packed) for v, packed in zip(found.rec.versions, found.packed, strict=True)]

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

    def query(
        self,
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

    def recall(
        self,
        query: str,
        *,
        scope: str | None = None,
        tags: Iterable[str] = (),
        any_tags: Iterable[str] = (),
        tag_prefix: str | None = None,
        limit: int = 10,
        mode: str | None = None,
    ) -> list[Recalled]:
        """The readable records whose content best matches `query` (docs/RECALL.md: words, "phrases",
        -excluded, prefix*), best first, ranked over the live records this agent may read in `scope`
        (exact, or a `prefix*` pattern) whose content is text, so that records it cannot read change
        neither the hits nor a score. `mode`: "lexical" ranks by BM25 over the words; "semantic" by
        the cosine of each record's vector with the query's, made by the client's embedder; "hybrid"
        by both (docs/RECALL.md §6); None is "hybrid" with an embedder and "lexical" without. `tags`,
        `any_tags` and `tag_prefix` keep only hits with all of `tags`, one of `any_tags` and a tag
        starting with `tag_prefix` (as `query` filters), before the `limit` best are taken; they leave
        the corpus, and so the scores, as they are. At most `limit` (1 to 1,000) results; each has the
        matching lines of its content (a record found by meaning alone, its first lines) and what each
        ranking gave it. A query that cannot be read, or a
        mode other than lexical without an embedder, is InvalidInput, saying what is wrong."""
        store = self._store

        def read() -> tuple[list[Hit], RecallQuery, str]:
            if not isinstance(query, str):
                raise InvalidInput(f"the query must be a string, got {type(query).__name__}")
            if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_RECALL:
                raise InvalidInput(f"limit must be an int from 1 to {MAX_RECALL}, got {limit!r}")
            chosen = check_mode(self.default_mode if mode is None else mode, self.embedder)
            parsed = parse_recall_query(query)
            filters, scopes = self._query(tags, any_tags, tag_prefix, scope, None)
            return store.recall(parsed, scopes, filters, limit, chosen), parsed, chosen

        # A lexical recall's first statement (the text index's) brings the head too, as get and query
        # do; a recall by meaning first catches up its vectors, and the head in a statement of its own.
        if mode == "lexical" or (mode is None and self.embedder is None):
            hits, parsed, chosen = store.read_fresh(read)
        else:
            store.refresh()
            hits, parsed, chosen = read()
        records = self._latest_records([hit.found for hit in hits])
        wanted, prefixes = parsed.highlights
        out = []
        for record, hit in zip(records, hits, strict=True):
            content = record.content
            lines = matching_lines(content, wanted, prefixes) if isinstance(content, str) else []
            if not lines and chosen != "lexical" and isinstance(content, str):
                lines = first_lines(content)  # found by meaning alone: no line holds a word of the query
            out.append(Recalled(record, hit.score, tuple(lines),
                                hit.score if chosen == "lexical" else hit.lexical, hit.semantic))
        return out

    @property
    def default_mode(self) -> str:
        """The mode `recall` uses when none is given: "hybrid" with an embedder, else "lexical"."""
        return "lexical" if self.embedder is None else "hybrid"

    def list_records(
        self,
        tags: Iterable[str] = (),
        any_tags: Iterable[str] = (),
        tag_prefix: str | None = None,
        scope: str | None = None,
        limit: int | None = None,
    ) -> list[RecordInfo]:
        """Like query, without the content: none is returned (nor, on PostgreSQL, sent; the tags are
        checked against each record's put all the same)."""
        infos = []
        for found in self._store.read_fresh(
            lambda: self._store.select(*self._query(tags, any_tags, tag_prefix, scope, limit), payloads=False)
        ):
            r = found.rec
            latest = r.versions[-1]
            created, updated = _times(r, latest)
            infos.append(RecordInfo(
                id=r.id, version=latest.ver, scope=r.scope, tags=r.tags, size=latest.size, agent_id=latest.agent,
                created_at=created, updated_at=updated, seq=latest.seq,
            ))
        return infos

    # -- what a writer checks its writes against, readable or not ------------------------------------
    def scope_has(self, scope: str, tags: Iterable[str] = (), tag_prefix: str | None = None) -> bool:
        """Whether a live record in exactly `scope` has every tag in `tags` and one starting with
        `tag_prefix`, whether or not this agent may read it. Needs `write` in `scope`: a writer must not
        write beside what it cannot see (a second memory-tool file at one path), so this reveals to it
        that such a record exists, and nothing else. No content is read: the candidates are the records
        the index lists under `tag_prefix` (if given), else the first tag, so put the rarest tag first."""
        return bool(self._scope_recs(scope, tags, tag_prefix, limit=1))

    def scope_usage(self, scope: str, tag: str, tag_prefix: str | None = None) -> ScopeUsage:
        """How many live records in exactly `scope` hold `tag` (and a tag starting with `tag_prefix`, if
        given), and their bytes (latest versions, and all versions), whether or not this agent may read
        them; for quotas. Needs `write` in `scope`. The backend answers from its index (no content is
        read)."""
        check_name(scope, "scope")
        wanted = check_tags([tag], self.limits)
        tag_prefix = check_tag_prefix(tag_prefix)
        self._store.refresh()
        self._require(self._acl(), "write", scope)
        usage = self._store.usage(scope, wanted[0], tag_prefix)
        return ScopeUsage(usage.records, usage.live_bytes, usage.version_bytes)

    def _scope_recs(
        self, scope: str, tags: Iterable[str], tag_prefix: str | None, limit: int | None
    ) -> list[Rec]:
        check_name(scope, "scope")
        given = list(tags) if isinstance(tags, Iterable) and not isinstance(tags, (str, bytes)) else tags
        wanted = check_tags(given, self.limits)
        tag_prefix = check_tag_prefix(tag_prefix)
        if not wanted and tag_prefix is None:
            raise InvalidInput("a tag or a tag_prefix must select the records")
        self._store.refresh()
        self._require(self._acl(), "write", scope)
        # every record of exactly this scope, readable by this agent or not
        scopes = ScopeFilter(True, requested=scope)
        return [f.rec for f in self._store.select(Query(wanted, (), tag_prefix, limit), scopes, payloads=False)]

    # -- audit -----------------------------------------------------------------------------------------
    def verify(
        self, pubkey: bytes | str | None = None, expect_head: tuple[int, str] | None = None, *,
        embeddings: str = "check",
    ) -> VerifyReport:
        """Check the whole database: every hash and link, payload digests, erasures, signatures, and that
        what the backend serves from (indexes, tables) is exactly what the chain says. Returns every
        problem found. Needs admin on `*`: the report describes the whole chain (its entry count, head,
        erasures, and problems by seq), in scopes this agent cannot read too. Semantic recall's vectors:
        each belongs to a live record's latest version, in its scope, of the recorded embedder's length,
        finite and of unit length; with this client's embedder, `embeddings="check"` (the default) embeds
        32 of them again, spread over all, and `embeddings="recompute"` every one (docs/RECALL.md §6.5)."""
        chosen = check_embeddings(embeddings)
        self._store.refresh()
        self._require_everything(self._acl(), "verify the chain")
        return self._store.verify(_pubkey_bytes(pubkey), expect_head, embeddings=chosen)

    def verify_scopes(self, scopes: str | Iterable[str]) -> ScopeReport:
        """Check the whole chain as `verify` does, and report what concerns the records this agent may
        read in `scopes` (exact scope names): every version of each (its entry, its links, its payload
        against its digest, and what the backend serves for it), and whether the chain has problems
        elsewhere, which are not described. Needs `read` in each scope, not admin on `*`: the report
        shows nothing of other scopes, nor the chain's length or head. It reads the whole chain, as
        `verify` does."""
        names = [scopes] if isinstance(scopes, str) else list(scopes)
        wanted = tuple(dict.fromkeys(check_name(scope, "scope") for scope in names))
        if not wanted:
            raise InvalidInput("verify_scopes needs at least one scope")
        self._store.refresh()
        acl = self._acl()
        for scope in wanted:
            self._require(acl, "read", scope)
        # The versions first: the chain verified next reaches at least as far as they do.
        founds = self._store.select(Query(), ScopeFilter(False, frozenset(wanted)), payloads=False)
        seqs = {version.seq for found in founds for version in found.rec.versions}
        report = self._store.verify(None, None)
        mine = tuple(problem for problem in report.problems if problem.seq in seqs)
        elsewhere = len(mine) < len(report.problems) or (not report.ok and not mine)
        return ScopeReport(report.ok, wanted, len(founds), len(seqs), mine, elsewhere)

    def export_audit(
        self, dest: str | os.PathLike[str] | IO[str], since: int = 0, include_content: bool = False
    ) -> int:
        """Write the chain as JSON Lines (docs/FORMAT.md §5.2). Needs admin on `*`: the chain names the ids and
        scopes of every record, readable by the caller or not."""
        self._store.refresh()
        if not self._acl().allows(self.agent_id, "admin", "*"):
            raise PermissionDenied(f"{self.agent_id} may not export the audit trail: it needs admin on *")
        return export_audit(self._store, dest, since=since, include_content=include_content)

    def copy_to(self, destination: str | os.PathLike[str], progress: Progress | None = None) -> VerifyReport:
        """Write this database, entry for entry, into a new one (a file path or a postgresql:// URI, on
        either backend), and return the destination's verify report: its head is this one's as of the
        copy. Payloads of forgotten records are not copied. Needs admin on `*`: the copy holds every
        scope. The source may be written to meanwhile; the copy is a consistent prefix of its chain."""
        self._store.refresh()
        if not self._acl().allows(self.agent_id, "admin", "*"):
            raise PermissionDenied(f"{self.agent_id} may not copy the database: it needs admin on *")
        target = os.fspath(destination)
        last, items = chain_of(self._store)
        write_chain(target, items, progress, last[0] + 1, copy_mode(self._store))
        with MnemoClient(target, self.agent_id, readonly=True) as copy:
            report = copy.verify()
        if report.head_seq != last[0]:
            raise IntegrityError(f"the copy at {target} ends at seq {report.head_seq}, not at {last[0]}")
        return report

    def checkpoint(self) -> int | None:
        """Write a signed checkpoint over the current head (with a signing key) and the index snapshot.
        Returns the checkpoint's seq, or None without a signing key."""
        self._store.check_writable()
        seq = None
        if self._signing_key is not None:
            key = self._signing_key
            with self._store.writing() as batch:
                db_id = self._store.db_id
                head_seq, head_hash = self._store.head()  # what it signs: the entry just before it
                sig = key.sign(checkpoint_message(db_id, head_seq, head_hash))
                pub = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
                body = {"db_id": db_id, "head": head_hash, "key": pub, "seq": head_seq, "sig": sig}
                seq = batch.stage("checkpoint", self.agent_id, body).seq
            self._since_checkpoint = 0
        if self._store.current_batch() is None:
            self._store.persist()
        return seq

    def compact(self) -> dict[str, int]:
        """Rewrite the log without erased payload bytes; returns sizes before and after. On PostgreSQL
        it first waits, lock_timeout at most, for the transactions older than the call, which could still
        see the erased rows (else LockTimeout names them: docs/POSTGRES.md)."""
        self._store.check_writable()
        if not self._acl().allows(self.agent_id, "admin", "*"):
            raise PermissionDenied(f"{self.agent_id} may not compact: it needs admin on *")
        return self._store.compact()

    def stats(self) -> dict[str, Any]:
        """Counts and sizes, for humans and monitoring. Counts cover only what this agent may read; the
        figures of the whole log (entries, head, log_bytes) are None unless it holds admin on `*`, since
        they change with every write in every scope."""
        store = self._store
        if store.closed:
            raise Closed("the client is closed")
        store.refresh()
        # Counts cover only what this agent may read, so they do not reveal other scopes.
        everything = self._acl().allows(self.agent_id, "admin", "*")
        records, versions, tags = store.counts(self._scopes())
        seq, head = store.head()
        info = store.info()
        log_bytes = info.pop("log_bytes", None)
        return {
            "path": store.path,
            "db_id": store.db_id.hex(),
            "agent_id": self.agent_id,
            "entries": seq + 1 if everything else None,
            "head_seq": seq if everything else None,
            "head_hash": head.hex() if everything else None,
            "records": records,
            "versions": versions,
            "tags": tags,
            "log_bytes": log_bytes if everything else None,
            **info,
            "durability": store.durability,
            "readonly": store.readonly,
            "recovery": list(store.recovery),
        }


def reindex(
    db_path: str | os.PathLike[str], agent_id: str, embedder: Embedder | str = "local",
    progress: Progress | None = None,
) -> int:
    """Make every live record's vector again with `embedder`, whatever made the ones the database holds
    (an open with another embedder is refused until then: EmbedderMismatch), and return how many were
    made. `progress(done, total)` is called as they are. Needs admin on `*`: the vectors of every scope
    are made."""
    check_agent_id(agent_id, "agent_id")
    chosen = check_embedder(embedder)
    store = open_storage(os.fspath(db_path), agent_id, embedder=chosen, reindex=True)
    try:
        store.refresh()
        if not store.acl().allows(agent_id, "admin", "*"):
            raise PermissionDenied(f"{agent_id} may not rebuild the vectors: it needs admin on *")
        return store.reindex(progress)
    finally:
        store.close()


def _times(rec: Rec, version: Version) -> tuple[datetime, datetime]:
    """(created_at, updated_at) of a record as of `version`. One conversion for a first version (most
    records have no other): datetimes are immutable, so both fields may share it."""
    updated = ns_to_datetime(version.ts_ns)
    created_ns = rec.versions[0].ts_ns
    return (updated if created_ns == version.ts_ns else ns_to_datetime(created_ns)), updated


def _prepare_payload(content: str | bytes, tags: tuple[str, ...], metadata: dict[str, Any]) -> tuple[bytes, bytes]:
    """(digest, payload) of a put: a fresh salt, the packed fields, and the commitment to them. Tags
    and metadata are in canonical form (check_tags, check_metadata), so packing needs no sorting."""
    return seal_fields(random_bytes(SALT_SIZE), content, tags, metadata)


def _load_signing_key(key: Any) -> Any:
    if isinstance(key, Ed25519PrivateKey):
        return key
    if isinstance(key, (bytes, bytearray)) and len(key) == 32:
        return Ed25519PrivateKey.from_private_bytes(bytes(key))
    if isinstance(key, (str, os.PathLike)):
        return load_private_key(key)
    raise InvalidInput("signing_key must be an Ed25519PrivateKey, 32 raw seed bytes, or a key file path")


def _pubkey_bytes(pubkey: bytes | str | None) -> bytes | None:
    if pubkey is None or isinstance(pubkey, bytes):
        return pubkey
    return load_public_key(pubkey)
