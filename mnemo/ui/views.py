"""What each page shows, as values for its template: read through the memory tool server (paths, mounts,
the tree, a file's versions, search) and MnemoClient (records, the chain, verify, grants, forget), as the
agent the UI was started for. Nothing here renders markup: the templates do, escaping every value.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..client import MnemoClient
from ..errors import InvalidInput, NotFound
from ..recall.analysis import marked_spans
from ..recall.query import parse as parse_query
from ..record import MemoryRecord, Recalled, RecordInfo, ScopeReport, VerifyReport
from ..tools.paths import MEMORY_TAG, ancestors
from ..tools.server import MnemoMemoryToolServer

RECENT_ENTRIES = 100
"""How many of the chain's last entries the chain page lists."""
SHOWN_CHECKPOINTS = 20
SEARCH_LIMIT = 20


# -- the tree -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TreeRow:
    """One line of the tree: a directory (with the files beneath it and their bytes) or a file (with what
    the index knows of its latest version: size, version count, seq, agent and time)."""

    path: str
    name: str
    depth: int
    info: RecordInfo | None  # None for a directory
    files: int = 0  # a directory's files, at any depth
    size: int = 0  # their bytes (latest versions)
    mount: str | None = None  # the scope mounted here, at a mount point


@dataclass(frozen=True)
class Tree:
    root: str
    rows: list[TreeRow]
    mounts: dict[str, str]  # point -> scope, those the agent sees
    stamp: str  # changes when any file or mount of the tree does


def tree(server: MnemoMemoryToolServer) -> Tree:
    """The whole tree the agent sees: one listing of each mount's scope, no content read."""
    root = server.root
    mounts = server.visible_mounts()
    files = server.files(root)
    dirs: dict[str, list[int]] = {root: [0, 0]}
    for point in mounts:
        for d in [*ancestors(point, root), point]:
            dirs.setdefault(d, [0, 0])
    for path, info in files:
        for d in [root, *ancestors(path, root)]:
            held = dirs.setdefault(d, [0, 0])
            held[0] += 1
            held[1] += info.size
    entries: list[tuple[tuple[str, ...], TreeRow]] = []
    base = root.count("/")
    for d, (count, size) in dirs.items():
        entries.append((_key(d), TreeRow(d, d.rsplit("/", 1)[1], d.count("/") - base, None, count, size,
                                         mounts.get(d))))
    for path, info in files:
        entries.append((_key(path), TreeRow(path, path.rsplit("/", 1)[1], path.count("/") - base, info)))
    entries.sort(key=lambda item: item[0])
    digest = hashlib.sha256()
    for point, scope in mounts.items():
        digest.update(f"m {point} {scope}\n".encode())
    for path, info in files:
        digest.update(f"f {path} {info.id} {info.seq}\n".encode())
    return Tree(root, [row for _, row in entries], mounts, digest.hexdigest()[:32])


def _key(path: str) -> tuple[str, ...]:
    """Sorts a directory before what it holds, its entries by name."""
    return tuple(path.split("/"))


# -- a file or a record, its versions and their differences --------------------------------------------


def text_of(record: MemoryRecord) -> str:
    """A version's content as text: binary content decoded as UTF-8, bytes that are not replaced."""
    content = record.content
    return content.decode("utf-8", errors="replace") if isinstance(content, bytes) else content


@dataclass(frozen=True)
class Versions:
    """A file (by path) or a record (by id): every version, oldest first, and the one shown."""

    path: str | None
    rec_id: str
    versions: list[MemoryRecord]
    shown: MemoryRecord

    @property
    def lines(self) -> list[str]:
        return text_of(self.shown).split("\n")

    @property
    def binary(self) -> bool:
        return isinstance(self.shown.content, bytes)


def _pick(versions: list[MemoryRecord], version: int | None) -> MemoryRecord:
    if version is None:
        return versions[-1]
    for record in versions:
        if record.version == version:
            return record
    raise NotFound(f"there is no version {version}")


def file_versions(server: MnemoMemoryToolServer, path: str, version: int | None = None) -> Versions:
    """The memory-tool file at `path` and its versions (those from before a rename included)."""
    canonical = server.canonical_path(path)
    versions = server.history(canonical)
    return Versions(canonical, versions[-1].id, versions, _pick(versions, version))


def record_versions(client: MnemoClient, rec_id: str, version: int | None = None) -> Versions:
    versions = client.history(rec_id)
    return Versions(None, rec_id, versions, _pick(versions, version))


@dataclass(frozen=True)
class Diff:
    subject: Versions
    old: MemoryRecord
    new: MemoryRecord
    lines: list[tuple[str, str]]  # (kind: "add", "del", "hunk", "head" or "same", text)


def diff(subject: Versions, old: int, new: int) -> Diff:
    """The unified diff (difflib, three lines of context) from version `old` to version `new`."""
    a, b = _pick(subject.versions, old), _pick(subject.versions, new)
    name = subject.path or subject.rec_id
    out: list[tuple[str, str]] = []
    for line in difflib.unified_diff(text_of(a).split("\n"), text_of(b).split("\n"), f"{name} v{a.version}",
                                     f"{name} v{b.version}", lineterm=""):
        if line.startswith(("---", "+++")):
            kind = "head"
        elif line.startswith("@@"):
            kind = "hunk"
        else:
            kind = {"+": "add", "-": "del"}.get(line[:1], "same")
        out.append((kind, line))
    return Diff(subject, a, b, out)


# -- records that are not memory-tool files --------------------------------------------------------------


@dataclass(frozen=True)
class Records:
    records: list[MemoryRecord]  # by scope, then newest first
    scopes: list[str]  # the scopes they are in, for the filter
    tags: list[str]  # their tags
    scope: str | None
    tag: str | None


def records(client: MnemoClient, scope: str | None, tag: str | None) -> Records:
    """The readable records that are not memory-tool files, in `scope` (exact or `prefix*`) and with
    `tag` if given, with their metadata."""
    found = [r for r in client.query(tags=[tag] if tag else (), scope=scope or None) if MEMORY_TAG not in r.tags]
    found.sort(key=lambda r: (r.scope, -r.seq))
    tags = sorted({t for r in found for t in r.tags})
    return Records(found, sorted({r.scope for r in found}), tags, scope, tag)


# -- search ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    number: int
    segments: list[tuple[str, bool]]  # the line cut into pieces, each marked or not


@dataclass(frozen=True)
class Hit:
    path: str
    found: Recalled
    lines: list[Line]


@dataclass(frozen=True)
class Search:
    query: str
    path: str
    mode: str | None
    hits: list[Hit]
    more: bool


def segments(text: str, spans: list[tuple[int, int]]) -> list[tuple[str, bool]]:
    """`text` cut at `spans`: the pieces in order, each with whether it is a marked span."""
    out: list[tuple[str, bool]] = []
    at = 0
    for start, end in spans:
        if start > at:
            out.append((text[at:start], False))
        out.append((text[start:end], True))
        at = end
    if at < len(text):
        out.append((text[at:], False))
    return out


def search(server: MnemoMemoryToolServer, query: str, path: str | None, mode: str | None) -> Search:
    """The files under `path` that best match `query` (the memory tool's search, docs/MEMORY_TOOL.md
    §11), each with its matching lines and, in them, the words that match marked."""
    found, more = server.search_files(query, path, SEARCH_LIMIT, mode)
    wanted, prefixes = parse_query(query).highlights
    hits = [
        Hit(tree_path, hit, [Line(n, segments(text, marked_spans(text, wanted, prefixes))) for n, text in hit.lines])
        for tree_path, hit in found
    ]
    return Search(query, path or server.root, mode, hits, more)


# -- the chain -----------------------------------------------------------------------------------------------


def is_admin(client: MnemoClient) -> bool:
    """Whether the agent holds admin on `*`: what the chain, its head and the grants need."""
    return "admin" in client.permissions().get("*", ())


@dataclass(frozen=True)
class Chain:
    admin: bool
    head: tuple[int, str] | None
    entries: list[Any]  # the last RECENT_ENTRIES, newest first
    checkpoints: list[Any]  # the last SHOWN_CHECKPOINTS, newest first
    grants: dict[str, dict[str, tuple[str, ...]]]
    permissions: dict[str, tuple[str, ...]]


def chain(client: MnemoClient) -> Chain:
    """The chain's last entries, its checkpoints and the grants in force, for an agent with admin on `*`;
    for any other, only its own permissions (the chain names every record's id and scope)."""
    mine = client.permissions()
    if not is_admin(client):
        return Chain(False, None, [], [], {}, mine)
    head = client.head
    entries = client.log(since=max(0, head[0] - RECENT_ENTRIES + 1))
    checkpoints = client.log(op="checkpoint")[-SHOWN_CHECKPOINTS:]
    return Chain(True, head, entries[::-1], checkpoints[::-1], client.grants(), mine)


def verify(client: MnemoClient, server: MnemoMemoryToolServer) -> VerifyReport | ScopeReport:
    """The whole database checked (admin on `*`), else the chain checked and reported for the scopes of
    the tree the agent sees."""
    if is_admin(client):
        return client.verify()
    return client.verify_scopes(list(dict.fromkeys(server.visible_mounts().values())))


# -- forget ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A record a forget would erase, every version of it."""

    rec_id: str
    scope: str
    label: str  # its path, or its tags
    versions: int
    size: int
    updated_at: datetime


@dataclass(frozen=True)
class Selection:
    path: str | None  # a file or a directory of the tree
    rec_id: str | None  # or one record
    targets: list[Target]

    @property
    def ids(self) -> list[str]:
        return [t.rec_id for t in self.targets]


def _target(info: RecordInfo, label: str) -> Target:
    return Target(info.id, info.scope, label, info.version, info.size, info.updated_at)


def selection(server: MnemoMemoryToolServer, client: MnemoClient, path: str | None, rec_id: str | None) -> Selection:
    """What a forget of the file or directory at `path` (every file beneath it, mounts included), or of
    record `rec_id`, erases: give exactly one of them. NotFound when nothing is there."""
    if (path is None) == (rec_id is None):
        raise InvalidInput("forget a path or a record id, one of them")
    if rec_id is not None:
        record = client.get(rec_id)
        size = len(record.content) if isinstance(record.content, bytes) else len(record.content.encode("utf-8"))
        info = RecordInfo(record.id, record.version, record.scope, record.tags, size,
                          record.agent_id, record.created_at, record.updated_at, record.seq)
        return Selection(None, rec_id, [_target(info, " ".join(record.tags))])
    assert path is not None
    canonical = server.canonical_path(path)
    found = server.files(canonical)
    if not found:
        raise NotFound(f"nothing to forget: no file at or beneath {canonical}")
    return Selection(canonical, None, [_target(info, p) for p, info in found])
