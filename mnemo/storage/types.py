"""The value types the storage contract (mnemo/storage/contract.py) trades in: record versions and
records as the index holds them, what a read found, scope filters and queries, log items, and the
durability modes every backend takes. Nothing here knows a backend."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple, Union

from ..chain.codec import Entry
from ..errors import InvalidInput

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

    @property
    def only(self) -> str | None:
        """The exact scope the query asked for (not a `prefix*` pattern), else None: the one scope the
        read may see, if any."""
        requested = self.requested
        return requested if requested is not None and not requested.endswith("*") else None

    def narrowed(self, requested: str | None) -> ScopeFilter:
        return ScopeFilter(self.everything, self.exact, self.prefixes, requested)


ALL_SCOPES = ScopeFilter(True)


@dataclass(frozen=True)
class Query:
    """Tag filters of a select: every tag of `tags`; at least one tag that is one of `any_tags` or starts
    with one of `any_prefixes` (when either is given); and a tag starting with `tag_prefix`; in id
    (creation) order, at most `limit` records."""

    tags: tuple[str, ...] = ()
    any_tags: tuple[str, ...] = ()
    tag_prefix: str | None = None
    limit: int | None = None
    any_prefixes: tuple[str, ...] = ()

    @property
    def filters_tags(self) -> bool:
        """Whether any tag filter is set (else every record matches)."""
        return bool(self.tags or self.any_tags or self.any_prefixes or self.tag_prefix is not None)

    def matches(self, tags: tuple[str, ...]) -> bool:
        if self.tags and not set(self.tags).issubset(tags):
            return False
        if self.any_tags or self.any_prefixes:
            some, starts = set(self.any_tags), self.any_prefixes
            if not any(t in some or t.startswith(starts) for t in tags):
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


class ChainItem(NamedTuple):
    """One entry of a chain being copied whole into a new database, with the payload to write for it
    (None: none, or erased)."""

    entry: Entry
    payload: bytes | None


def is_dsn(path: str) -> bool:
    """Whether a database name is a PostgreSQL connection URI rather than a file path."""
    return path.startswith(("postgresql://", "postgres://"))


def shown_name(db: str) -> str:
    """How messages name a database: a file path as given; a connection URI without its password
    (in the user part or a `password=` parameter), the rest kept, so that schemas stay apart. The one
    place a password is left out of a name (the PostgreSQL backend's display_name comes here too).

    The URI is cut where libpq cuts it, not as a URL: its user part runs to an `@` before the first `/`,
    and may hold a `?` or `#`, which a URL parser takes for the start of the query or fragment (and
    so would show `postgresql://u:a?b@h/d` whole). Of several `@`, the last is taken, and the user
    name ends at a `?` too: whatever might be a password is left out."""
    if not is_dsn(db):
        return db
    scheme, _, rest = db.partition("://")
    slash = rest.find("/")
    at = rest.rfind("@", 0, len(rest) if slash < 0 else slash)
    user = re.split("[:?]", rest[:at], maxsplit=1)[0] + "@" if at >= 0 else ""
    where, _, query = rest[at + 1 :].partition("?")
    query = "&".join(p for p in query.split("&") if p.split("=", 1)[0].lower() != "password")
    return f"{scheme}://{user}{where}" + (f"?{query}" if query else "")


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
    "ChainItem",
    "Usage",
    "Version",
    "check_durability",
    "check_group_commit_wait",
    "is_dsn",
    "shown_name",
]
