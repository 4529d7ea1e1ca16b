"""What each page shows, as values for its template: read through the memory tool server (paths, mounts,
the tree, a file's versions, search) and MnemoClient (records, the chain, verify, grants, forget), as the
agent the UI was started for. Nothing here renders markup: the templates do, escaping every value.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, NamedTuple
from urllib.parse import quote

from ..client import MnemoClient
from ..errors import InvalidInput, NotFound, PermissionDenied
from ..recall.analysis import marked_spans
from ..recall.query import parse as parse_query
from ..record import MemoryRecord, Recalled, RecordInfo, ScopeReport, VerifyReport
from ..tools.paths import MEMORY_TAG, ancestors
from ..tools.server import MnemoMemoryToolServer
from ..tools.text import format_size

RECENT_ENTRIES = 100
"""How many of the chain's last entries the chain page lists."""
SHOWN_CHECKPOINTS = 20
CHECKPOINT_SEARCH = 1 << 17
"""How many of the chain's last entries the chain page looks through for checkpoints, at most: a read
of the chain from a seq on starts near it, so the page costs what it shows, not the chain's length."""
SEARCH_LIMIT = 20
MAX_DEPTH_SHOWN = 16
_PLAIN = re.compile(r"[A-Za-z0-9/._~-]*")  # a path that quote() leaves as it is
"""Deeper lines of the tree are indented as this deep (the stylesheet's classes d0 to d16)."""


# -- the tree -------------------------------------------------------------------------------------------


class TreeRow(NamedTuple):
    """One line of the tree, its values ready to show: a directory (its file count and their bytes,
    latest versions) or a file (what the index knows of its latest version). A tuple, for a page of
    10,000 lines."""

    is_dir: bool
    path: str
    href: str  # the path, quoted for a URL's query
    name: str
    depth: int
    size: str
    versions: str  # a file's version count; a directory's "N files"
    when: str
    agent: str
    seq: str
    mount: str  # the scope mounted here, at a mount point; else ""
    forget: bool  # a directory holding files, each in a scope where the agent may forget: the forget link


@dataclass(frozen=True)
class Tree:
    root: str
    rows: list[TreeRow]
    mounts: dict[str, str]  # point -> scope, those the agent sees
    stamp: str  # changes when any file or mount of the tree does


def when(value: datetime) -> str:
    """A time as the pages show it: UTC, to the second."""
    return value.astimezone(timezone.utc).isoformat(" ", "seconds")[:19] + "Z"


def tree(server: MnemoMemoryToolServer) -> Tree:
    """The whole tree the agent sees: one listing of each mount's scope, no content read. Each directory
    comes before what it holds: its subdirectories, then its files, each by name."""
    root = server.root
    mounts = server.visible_mounts()
    files = server.files(root)
    held: dict[str, list[tuple[str, RecordInfo]]] = {root: []}  # directory -> its own files
    for path, info in files:
        held.setdefault(path[: path.rindex("/")], []).append((path, info))
    for d in [*held, *mounts]:
        for a in [*ancestors(d, root), d]:
            held.setdefault(a, [])
    subdirs: dict[str, list[str]] = {d: [] for d in held}
    for d in held:
        if d != root:
            subdirs[d[: d.rindex("/")]].append(d)
    totals: dict[str, tuple[int, int]] = {}
    forgettable = _forgettable(server.client, {info.scope for _, info in files})
    refused: set[str] = set()  # the directories beneath which a file is in a scope the agent may not forget

    def total(d: str) -> tuple[int, int]:
        count, size = len(held[d]), sum(info.size for _, info in held[d])
        if any(info.scope not in forgettable for _, info in held[d]):
            refused.add(d)
        for sub in subdirs[d]:
            c, b = total(sub)
            count, size = count + c, size + b
            if sub in refused:
                refused.add(d)
        totals[d] = (count, size)
        return count, size

    total(root)
    rows: list[TreeRow] = []
    base = root.count("/")
    # 10,000 lines: what many files share (a size, a second, a path of plain characters) is worked out once
    sizes: dict[int, str] = {}
    times: dict[datetime, str] = {}

    def href(path: str) -> str:
        return path if _PLAIN.fullmatch(path) else quote(path, safe="/")

    def walk(d: str) -> None:
        depth = min(d.count("/") - base, MAX_DEPTH_SHOWN)
        count, size = totals[d]
        rows.append(TreeRow(True, d, href(d), d[d.rindex("/") + 1 :], depth, format_size(size),
                            f"{count} file{'' if count == 1 else 's'}", "", "", "", mounts.get(d, ""),
                            count > 0 and d not in refused))
        inner = min(depth + 1, MAX_DEPTH_SHOWN)
        for sub in sorted(subdirs[d]):
            walk(sub)
        for path, info in held[d]:
            shown = sizes.get(info.size)
            if shown is None:
                shown = sizes[info.size] = format_size(info.size)
            changed = times.get(info.updated_at)
            if changed is None:
                changed = times[info.updated_at] = when(info.updated_at)
            rows.append(TreeRow(False, path, href(path), path[path.rindex("/") + 1 :], inner, shown,
                                str(info.version), changed, info.agent_id, str(info.seq), "", False))

    walk(root)
    digest = hashlib.sha256()
    for point, scope in mounts.items():
        digest.update(f"m {point} {scope}\n".encode())
    digest.update("".join(f"f {path} {info.id} {info.seq}\n" for path, info in files).encode())
    return Tree(root, rows, mounts, digest.hexdigest()[:32])


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


SHOWN_LINES = 20_000
"""The most lines of content, or of a diff, a page shows: a file of 1 MiB can hold a million lines, which
made a page of 57 MB that a browser tab does not get through."""
DIFF_CONTEXT = 3
"""Lines of context around each change, as `diff -u` gives."""
DIFF_ALIGN_LINES = 20_000
"""The most lines either version's changed middle (what lies between the lines both versions start and
end with) may hold for the diff to align them line by line; past it, they are shown replaced whole.
difflib's alignment costs far more than linear on some texts: two versions of a file under 1 MiB made so
took it minutes, with the page waiting and a core busy."""

Opcode = tuple[str, int, int, int, int]


@dataclass(frozen=True)
class Diff:
    subject: Versions
    old: MemoryRecord
    new: MemoryRecord
    lines: list[tuple[str, str]]  # (kind: "add", "del", "hunk", "head" or "same", text)
    whole: bool = False  # the changed middle is shown replaced whole: too long to align (DIFF_ALIGN_LINES)


def _range(start: int, stop: int) -> str:
    """A hunk's range as `diff -u` writes it (difflib's own format)."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start if length == 0 else start + 1},{length}"


def _groups(a: list[str], b: list[str]) -> tuple[list[list[Opcode]], bool]:
    """The hunks of the diff from `a` to `b`, and whether their changed middle is shown replaced whole.
    The lines both start and end with are set aside first (a look at each line, once), so that difflib
    aligns only what lies between them, with its context."""
    end = min(len(a), len(b))
    head = 0
    while head < end and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < end - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    lo = max(0, head - DIFF_CONTEXT)
    a_mid, b_mid = (head, len(a) - tail), (head, len(b) - tail)
    a_hi, b_hi = min(len(a), a_mid[1] + DIFF_CONTEXT), min(len(b), b_mid[1] + DIFF_CONTEXT)
    if max(a_mid[1] - a_mid[0], b_mid[1] - b_mid[0]) <= DIFF_ALIGN_LINES:
        matcher = difflib.SequenceMatcher(None, a[lo:a_hi], b[lo:b_hi])
        groups = [[(tag, i1 + lo, i2 + lo, j1 + lo, j2 + lo) for tag, i1, i2, j1, j2 in group]
                  for group in matcher.get_grouped_opcodes(DIFF_CONTEXT)]
        return [g for g in groups if not (len(g) == 1 and g[0][0] == "equal")], False
    tag = "replace" if a_mid[0] < a_mid[1] and b_mid[0] < b_mid[1] else "delete" if a_mid[0] < a_mid[1] else "insert"
    group: list[Opcode] = [("equal", lo, head, lo, head), (tag, *a_mid, *b_mid),
                           ("equal", a_mid[1], a_hi, b_mid[1], b_hi)]
    return [[op for op in group if op[0] != "equal" or op[1] < op[2]]], True


def diff(subject: Versions, old: int, new: int) -> Diff:
    """The unified diff (difflib's, three lines of context) from version `old` to version `new`."""
    a, b = _pick(subject.versions, old), _pick(subject.versions, new)
    name = subject.path or subject.rec_id
    old_lines, new_lines = text_of(a).split("\n"), text_of(b).split("\n")
    groups, whole = _groups(old_lines, new_lines)
    out: list[tuple[str, str]] = []
    if groups:
        out += [("head", f"--- {name} v{a.version}"), ("head", f"+++ {name} v{b.version}")]
    for group in groups:
        first, last = group[0], group[-1]
        out.append(("hunk", f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [("same", " " + line) for line in old_lines[i1:i2]]
                continue
            if tag in ("replace", "delete"):
                out += [("del", "-" + line) for line in old_lines[i1:i2]]
            if tag in ("replace", "insert"):
                out += [("add", "+" + line) for line in new_lines[j1:j2]]
    return Diff(subject, a, b, out, whole)


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
    searched_from: int  # when the checkpoints shown may not be all of the last SHOWN_CHECKPOINTS: the
    # first seq looked at for them (the search stopped at CHECKPOINT_SEARCH entries); else 0
    grants: dict[str, dict[str, tuple[str, ...]]]
    permissions: dict[str, tuple[str, ...]]


def chain(client: MnemoClient) -> Chain:
    """The chain's last entries, its checkpoints and the grants in force, for an agent with admin on `*`;
    for any other, only its own permissions (the chain names every record's id and scope)."""
    mine = client.permissions()
    if not is_admin(client):
        return Chain(False, None, [], [], 0, {}, mine)
    head = client.head
    entries = client.log(since=max(0, head[0] - RECENT_ENTRIES + 1))
    # back from the head in growing spans, until enough checkpoints, the chain's start or the bound
    span = min(1 << 10, CHECKPOINT_SEARCH)
    while True:
        since = max(0, head[0] + 1 - span)
        checkpoints = client.log(since=since, op="checkpoint")[-SHOWN_CHECKPOINTS:]
        if len(checkpoints) == SHOWN_CHECKPOINTS or since == 0 or span >= CHECKPOINT_SEARCH:
            break
        span *= 4
    partial = since if len(checkpoints) < SHOWN_CHECKPOINTS else 0
    return Chain(True, head, entries[::-1], checkpoints[::-1], partial, client.grants(), mine)


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


def _forgettable(client: MnemoClient, scopes: set[str]) -> set[str]:
    """Those of `scopes` where the agent may forget."""
    out = set()
    for scope in scopes:
        try:
            client.check_permission("forget", scope)
        except PermissionDenied:
            continue
        out.add(scope)
    return out


def may_forget(client: MnemoClient, chosen: Selection) -> None:
    """PermissionDenied, in the words the forget itself would use, unless the agent may forget in every
    scope of what `chosen` would erase (a forget erases all of it or nothing)."""
    for scope in dict.fromkeys(t.scope for t in chosen.targets):
        client.check_permission("forget", scope)


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
