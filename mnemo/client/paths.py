"""What a writer checks its writes against, readable or not: the memory-tool files at, beneath and
above a path in a scope, and the live records of a scope with some tags (for quotas). Each needs
`write` in the scope and reveals to the writer only what its own writes could run into
(docs/MEMORY_TOOL.md §4.1)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from ..acl import check_name
from ..errors import InvalidInput
from ..storage.contract import Query, Rec, ScopeFilter
from ..validation import (
    MEMORY_TAG,
    PATH_IS_DIRECTORY,
    PATH_TAG_PREFIX,
    PATH_TAKEN,
    PATH_UNDER_FILE,
    check_tag_prefix,
    check_tags,
    path_ancestors,
    path_problem,
)
from .core import ClientCore


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


def path_use(self: ClientCore, scope: str, path: str) -> PathUse:
    """What holds the memory-tool path `path` (canonical, docs/MEMORY_TOOL.md §4) in exactly `scope`:
    a file at it, files beneath it, a file above it, whether or not this agent may read them. Needs
    `write` in `scope`, as scope_has does, and reveals no more: a memory-tool server asks it before
    a create, which `remember` checks again in the same transaction."""
    check_name(scope, "scope")
    if not isinstance(path, str) or path_problem(path) is not None:
        raise InvalidInput(f"path must be a canonical memory-tool path, got {path!r}")
    _require_writer(self, scope)
    return _path_use(self, scope, path, None)


def check_path_free(self: ClientCore, scope: str, path: str, own_id: str | None) -> None:
    """Refuse to make a record (other than `own_id`) the memory-tool file at `path` in `scope` while
    a file of the scope, readable by this agent or not, is at that path, beneath it or at a path
    above it: a path names at most one file, and never a file and a directory at once. Called in
    the write's batch, after its `write` check (so only a writer of the scope learns that a path is
    taken, as the memory tool's own create tells it), under the writer lock: no other write comes
    between the check and the commit. It names no file the caller may not already name."""
    use = _path_use(self, scope, path, own_id)
    if use.file:
        raise InvalidInput(PATH_TAKEN.format(scope=scope, path=path))
    if use.above:
        raise InvalidInput(PATH_UNDER_FILE.format(scope=scope, path=path, ancestor=use.above[0]))
    if use.beneath:
        raise InvalidInput(PATH_IS_DIRECTORY.format(scope=scope, path=path))


def _path_use(self: ClientCore, scope: str, path: str, own_id: str | None) -> PathUse:
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


def scope_has(self: ClientCore, scope: str, tags: Iterable[str] = (), tag_prefix: str | None = None) -> bool:
    """Whether a live record in exactly `scope` has every tag in `tags` and one starting with
    `tag_prefix`, whether or not this agent may read it. Needs `write` in `scope`: a writer must not
    write beside what it cannot see (a second memory-tool file at one path), so this reveals to it
    that such a record exists, and nothing else. No content is read: the candidates are the records
    the index lists under `tag_prefix` (if given), else the first tag, so put the rarest tag first."""
    return bool(_scope_recs(self, scope, tags, tag_prefix, limit=1))


def scope_usage(self: ClientCore, scope: str, tag: str, tag_prefix: str | None = None) -> ScopeUsage:
    """How many live records in exactly `scope` hold `tag` (and a tag starting with `tag_prefix`, if
    given), and their bytes (latest versions, and all versions), whether or not this agent may read
    them; for quotas. Needs `write` in `scope`. The backend answers from its index (no content is
    read)."""
    check_name(scope, "scope")
    wanted = check_tags([tag], self.limits)
    tag_prefix = check_tag_prefix(tag_prefix)
    _require_writer(self, scope)
    usage = self._store.usage(scope, wanted[0], tag_prefix)
    return ScopeUsage(usage.records, usage.live_bytes, usage.version_bytes)


def _scope_recs(
    self: ClientCore, scope: str, tags: Iterable[str], tag_prefix: str | None, limit: int | None
) -> list[Rec]:
    check_name(scope, "scope")
    given = list(tags) if isinstance(tags, Iterable) and not isinstance(tags, (str, bytes)) else tags
    wanted = check_tags(given, self.limits)
    tag_prefix = check_tag_prefix(tag_prefix)
    if not wanted and tag_prefix is None:
        raise InvalidInput("a tag or a tag_prefix must select the records")
    _require_writer(self, scope)
    # every record of exactly this scope, readable by this agent or not
    scopes = ScopeFilter(True, requested=scope)
    return [f.rec for f in self._store.select(Query(wanted, (), tag_prefix, limit), scopes, payloads=False)]


def _require_writer(self: ClientCore, scope: str) -> None:
    """Caught up, and `write` in `scope`: what every look of a writer at its scope needs first."""
    self._store.refresh()
    self._require(self._acl(), "write", scope)
