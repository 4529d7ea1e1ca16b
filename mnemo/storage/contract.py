"""The storage contract: the few operations `MnemoClient` needs of a backend, and the value types they
trade in. Two backends implement it: the embedded chained log (`mnemo.storage.file`) and PostgreSQL
(`mnemo.storage.postgres`). The client, and everything built on it, works only through this.

A backend keeps one chain (docs/FORMAT.md §1) under the single-writer rule: `writing()` takes the writer
lock, catches up with what other writers committed, and yields a `Batch`; every entry the body stages
commits atomically when the body ends (none if it raises). Reads take a `ScopeFilter` saying what the
caller may read, and return only records it admits, with their payloads checked against the chain.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, Union

from ..errors import InvalidInput

if TYPE_CHECKING:
    from ..acl import Acl
    from ..record import VerifyReport
    from .batch import Batch
    from .codec import Entry

# How a write is made durable, on every backend: "fsync" returns once it is on disk (one fsync shared by
# concurrent writers), "batch" fsyncs at least every BATCH_INTERVAL seconds, "none" leaves it to the OS.
DURABILITY_MODES = ("fsync", "batch", "none")
BATCH_INTERVAL = 0.05


def check_durability(durability: object) -> str:
    """`durability` if it is one of DURABILITY_MODES; InvalidInput otherwise."""
    if not isinstance(durability, str) or durability not in DURABILITY_MODES:
        raise InvalidInput(f"durability must be 'fsync', 'batch' or 'none', got {durability!r}")
    return durability


def check_group_commit_wait(wait: object) -> None:
    """None (the backend's default) or a number of seconds from 0 to 1; InvalidInput otherwise."""
    if wait is not None and (isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 1):
        raise InvalidInput(f"group_commit_wait must be between 0 and 1 second, or None, got {wait!r}")


Progress = Callable[[int, int], None]  # (done, total): how far a long operation has come
PathArg = Union[str, "os.PathLike[str]"]  # a file path, as a string or a path object
Payloads = Literal["none", "latest", "all"]


class Version(NamedTuple):
    """One version of a record: its chain position, and where the backend keeps its entry and payload
    (opaque to the client: file offsets for the log, row keys for PostgreSQL)."""

    ver: int
    seq: int
    ts_ns: int
    agent: str
    size: int
    hash: bytes
    slot_off: int  # -1 while staged in an open transaction
    slot_len: int
    entry_off: int = -1  # where the put's entry bytes are (-1 while staged)
    entry_len: int = 0


class Rec(NamedTuple):
    """A live record: its scope, latest tags, and every version oldest first. Replaced, never mutated."""

    id: str
    scope: str
    tags: tuple[str, ...]
    versions: tuple[Version, ...]

    @property
    def latest(self) -> Version:
        return self.versions[-1]


class Found(NamedTuple):
    """A record a read admitted, and the packed fields of the versions asked for: none, the latest
    one, or every version oldest first."""

    rec: Rec
    packed: tuple[bytes | memoryview, ...] = ()


@dataclass(frozen=True)
class ScopeFilter:
    """Which scopes a read may see: what the caller may read (`everything`, or `exact` scopes and scope
    `prefixes`), narrowed by the `requested` scope of a query (exact, or a `prefix*` pattern)."""

    everything: bool
    exact: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()
    requested: str | None = None

    def admits(self, scope: str) -> bool:
        requested = self.requested
        if requested is not None:
            if requested.endswith("*"):
                if not scope.startswith(requested[:-1]):
                    return False
            elif scope != requested:
                return False
        return self.everything or scope in self.exact or scope.startswith(self.prefixes)

    def narrowed(self, requested: str | None) -> ScopeFilter:
        return ScopeFilter(self.everything, self.exact, self.prefixes, requested)


ALL_SCOPES = ScopeFilter(True)


@dataclass(frozen=True)
class Query:
    """Tag filters of a select: every tag of `tags`, at least one of `any_tags`, and a tag starting with
    `tag_prefix`; in id (creation) order, at most `limit` records."""

    tags: tuple[str, ...] = ()
    any_tags: tuple[str, ...] = ()
    tag_prefix: str | None = None
    limit: int | None = None

    def matches(self, tags: tuple[str, ...]) -> bool:
        if self.tags and not set(self.tags).issubset(tags):
            return False
        if self.any_tags and set(self.any_tags).isdisjoint(tags):
            return False
        prefix = self.tag_prefix
        return prefix is None or any(t.startswith(prefix) for t in tags)


class Usage(NamedTuple):
    """What the live records of one scope holding one tag take up, whoever may read them."""

    records: int
    live_bytes: int  # sizes of their latest versions
    versions: int
    version_bytes: int  # sizes of every version kept


class LogItem(NamedTuple):
    """One chain entry as a backend holds it, with its payload: `state` is `ok` (present; its bytes in
    `payload` when they were asked for), `erased`, `none` (the entry has none) or `bad` (damaged).
    `where` is the entry's file offset in the log, None elsewhere."""

    entry: Entry
    state: str
    payload: bytes | None
    where: int | None


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

    def counts(self, scopes: ScopeFilter) -> tuple[int, int, int]:
        """(records, versions, distinct tags) of the live records `scopes` admits."""

    def usage(self, scope: str, tag: str) -> Usage:
        """What the live records of `scope` holding `tag` take up, whoever may read them (quotas)."""

    def log(self, since: int = 0, payloads: bool = False) -> Iterator[LogItem]:
        """Every entry from seq `since` on, in order, read as an auditor would (strictly: damage raises
        IntegrityError); with `payloads`, the payload bytes of `ok` entries."""

    def verify(
        self, pubkey: bytes | None, expect_head: tuple[int, str] | None, progress: Progress | None = None
    ) -> VerifyReport:
        """Check everything: the chain, payloads and erasures, and that whatever the backend derives
        from the chain (indexes, tables) is exactly what the chain says. Every problem, not the first."""

    def compact(self) -> dict[str, int]:
        """Reclaim the space of erased payloads (and whatever still holds their bytes)."""

    def persist(self) -> None:
        """Save whatever speeds up the next open (the file's index snapshot); a no-op elsewhere."""

    def info(self) -> dict[str, Any]:
        """Backend figures for stats(): sizes, how it opened."""

    def close(self) -> None:
        """Flush and release everything; idempotent."""


def is_dsn(path: str) -> bool:
    """Whether a database name is a PostgreSQL connection URI rather than a file path."""
    return path.startswith(("postgresql://", "postgres://"))


def shown_name(db: str) -> str:
    """How messages name a database: a file path as given; a connection URI without its password
    (in the user part or a `password=` parameter), the rest kept, so that schemas stay apart."""
    if not is_dsn(db):
        return db
    from urllib.parse import urlsplit

    parts = urlsplit(db)
    netloc = parts.netloc
    if "@" in netloc:
        user, hosts = netloc.rsplit("@", 1)
        netloc = user.split(":", 1)[0] + "@" + hosts
    query = "&".join(p for p in parts.query.split("&") if p.split("=", 1)[0].lower() != "password")
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")


__all__ = [
    "ALL_SCOPES",
    "BATCH_INTERVAL",
    "DURABILITY_MODES",
    "Found",
    "PathArg",
    "LogItem",
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
