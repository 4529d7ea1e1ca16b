"""The storage contract: the few operations `MnemoClient` needs of a backend. Two backends implement it:
the embedded chained log (`mnemo.storage.file`) and PostgreSQL (`mnemo.storage.postgres`). The client,
and everything built on it, works only through this. The value types it trades in are in
mnemo/storage/types.py (and importable from here too).

A backend keeps one chain (docs/FORMAT.md §1) under the single-writer rule: `writing()` takes the writer
lock, catches up with what other writers committed, and yields a `Batch`; every entry the body stages
commits atomically when the body ends (none if it raises). Reads take a `ScopeFilter` saying what the
caller may read, and return only records it admits, with their payloads checked against the chain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from ..acl import Acl
from ..recall.query import Query as RecallQuery
from ..record import MemoryRecord, VerifyReport
from .batch import Batch
from .recall import Hit
from .types import (
    ALL_SCOPES,
    BATCH_INTERVAL,
    DURABILITY_MODES,
    ChainItem,
    Found,
    LogItem,
    PathArg,
    Payloads,
    Progress,
    Query,
    Rec,
    ScopeFilter,
    Usage,
    Version,
    check_durability,
    check_group_commit_wait,
    is_dsn,
    shown_name,
)

T = TypeVar("T")


class Storage(Protocol):
    """What a backend offers the client. Thread-safe: several threads of one client share it."""

    path: str  # how messages name the database: a file path, or the DSN without its password
    db_id: bytes
    readonly: bool
    durability: str
    closed: bool
    recovery: list[str]  # what opening repaired, in order

    def refresh(self) -> None:
        """Catch up with what other writers committed; cheap when nothing changed; never blocks."""

    def read_fresh(self, read: Callable[[], T]) -> T:
        """refresh(), then `read()`, which makes its scopes from acl() and reads with them (get or
        select). A backend may instead catch up in the round trip of that read itself: it then runs
        `read` again as long as the ACL the read found differs from the one its scopes were made from,
        so that what is returned was read with the ACL as of the read."""

    def head(self) -> tuple[int, bytes]:
        """(seq, hash) of the last entry, as of this thread's open batch if it has one."""

    def tree_head(self) -> tuple[int, bytes]:
        """(size, root) of the RFC 6962 Merkle tree over every entry (docs/TRANSPARENCY.md §1), kept up
        to date as entries are committed or read, without re-reading the chain."""

    def acl(self) -> Acl:
        """The ACL replayed from the chain, as of this thread's open batch if it has one. Callers
        treat it as read-only."""

    def check_writable(self) -> None:
        """Raise Closed, ReadOnly or DurabilityError if a write could not be accepted."""

    def writing(self, transactional: bool = False, blind: bool = False) -> AbstractContextManager[Batch]:
        """Hold the writer lock, caught up, and commit what the body stages as one atomic unit (nothing
        if it raises). Nested inside this thread's open batch it yields that batch and commits nothing.
        `transactional`: the body reads its own staged writes back. `blind`: the body stages only puts
        of new records and reads nothing but the ACL, so a backend may build the batch without holding
        the lock and build it again if another writer came first (PostgreSQL does)."""

    def current_batch(self) -> Batch | None:
        """This thread's open batch, if any."""

    def get(self, rec_id: str, scopes: ScopeFilter, payloads: Payloads = "latest") -> Found | None:
        """The live record `rec_id` if `scopes` admits its scope, else None, doing the same work for a
        record that is missing as for one that is not admitted (no timing tells them apart)."""

    def select(self, query: Query, scopes: ScopeFilter, payloads: bool = True) -> list[Found]:
        """The live records `query` and `scopes` admit, in id order, with their latest payloads."""

    def get_record(
        self, rec_id: str, scopes: ScopeFilter, build: Callable[[Found], MemoryRecord]
    ) -> MemoryRecord | None:
        """get(rec_id, scopes)'s latest version as a MemoryRecord, or None: made by `build` (the
        client's), or by the backend itself from what it read and checked, as `build` makes it."""

    def select_records(
        self, query: Query, scopes: ScopeFilter, build: Callable[[list[Found]], list[MemoryRecord]]
    ) -> list[MemoryRecord]:
        """select(query, scopes)'s latest versions as MemoryRecords: made by `build` (the client's), or by
        the backend itself from what it read and checked, as `build` makes them."""

    def recall(
        self, query: RecallQuery, scopes: ScopeFilter, tags: Query, limit: int, mode: str = "lexical"
    ) -> list[Hit]:
        """The `limit` best live records whose latest version matches `query` (docs/RECALL.md), in a
        scope `scopes` admits and with tags `tags` matches (all of its `tags`, one of its `any_tags`
        and a tag starting with its `tag_prefix`; its limit unused), ranked over the corpus of every
        live record `scopes` admits whose latest content is text (tags leave it as it is), as of this
        thread's open batch; each with its latest packed fields. `mode`: "lexical" ranks by BM25;
        "semantic" by the cosine of the record's vector with the query's, "hybrid" by both
        (mnemo.recall.fusion), with the store's embedder. The tag filters apply before the `limit` best
        are taken. Nothing of a replaced or forgotten version is found or counted. Precondition:
        limit >= 0; a mode other than lexical only on a store opened with an embedder."""

    def reindex(self, progress: Progress | None = None) -> int:
        """Make every live record's vector again with the store's embedder (opened with `reindex`),
        and keep them; the number made."""

    def counts(self, scopes: ScopeFilter) -> tuple[int, int, int]:
        """(records, versions, distinct tags) of the live records `scopes` admits."""

    def usage(self, scope: str, tag: str, tag_prefix: str | None = None) -> Usage:
        """What the live records of `scope` holding `tag` (and a tag starting with `tag_prefix`, if given)
        take up, whoever may read them (quotas)."""

    def log(self, since: int = 0, payloads: bool = False) -> Iterator[LogItem]:
        """Every entry from seq `since` on, in order, read as an auditor would (strictly: damage raises
        IntegrityError); with `payloads`, the payload bytes of `ok` entries."""

    def verify(
        self, pubkey: bytes | None, expect_head: tuple[int, str] | None, progress: Progress | None = None,
        embeddings: str = "check",
    ) -> VerifyReport:
        """Check everything: the chain, payloads and erasures, and that whatever the backend derives
        from the chain (indexes, tables) is exactly what the chain says. Every problem, not the first.
        `embeddings`: "check" embeds a sample of the vectors again, "recompute" every one."""

    def compact(self) -> dict[str, int]:
        """Reclaim the space of erased payloads (and whatever still holds their bytes)."""

    def persist(self) -> None:
        """Save whatever speeds up the next open (the file's index snapshot); a no-op elsewhere."""

    def info(self) -> dict[str, Any]:
        """Backend figures for stats(): sizes, how it opened."""

    def close(self) -> None:
        """Flush and release everything; idempotent."""


__all__ = [
    "ALL_SCOPES",
    "BATCH_INTERVAL",
    "DURABILITY_MODES",
    "ChainItem",
    "Found",
    "Hit",
    "LogItem",
    "PathArg",
    "Payloads",
    "Progress",
    "Query",
    "Rec",
    "ScopeFilter",
    "Storage",
    "Usage",
    "Version",
    "check_durability",
    "check_group_commit_wait",
    "is_dsn",
    "shown_name",
]
