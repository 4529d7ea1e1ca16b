"""Several scopes mounted into one memory-tool tree (docs/MOUNTS.md).

`MnemoMemoryToolServer(client, mounts={"/memories": "agent:me", "/memories/team": "team:research"})`
serves each path from the scope of its longest mount point that the agent may read. A scope's files are
stored under the server's root as if the scope were mounted there (`/memories/team/notes.md` is the
record tagged `path:/memories/notes.md` in `team:research`), so a single-scope server on that scope,
the CLI and every other mount of it see the same files.

A mount the agent may not read is not there for it: its paths belong to the enclosing mount, exactly as
if it had not been configured, so no command can tell what it holds, or that it holds anything. The
root's mount is never hidden: an agent that may not read it gets the permission-denied results of the
single-scope server. Every command is one transaction; a move across mounts is a put in the target
scope and a forget in the source scope in the same commit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from mnemo.acl import check_name
from mnemo.errors import InvalidInput
from mnemo.tools.commands import FIXED_TEXT, HOLDS_TEXT
from mnemo.tools.layout import Layout, Mount, Tree
from mnemo.tools.paths import PathError, canonicalize

__all__ = ["FIXED_TEXT", "HOLDS_TEXT", "Mount", "MountTable", "check_mounts"]


def check_mounts(
    mounts: Mapping[str, str], root: str, root_scope: str | None, home: str, max_path_length: int
) -> tuple[Mount, ...]:
    """The mounts, deepest point first, the root's last; `InvalidInput` for a bad table.

    Each mount point must be the root or a canonical path beneath it, each scope a plain name mounted
    once. The root's scope is the table's, else `root_scope` (giving both is refused), else `home`."""
    if not isinstance(mounts, Mapping):
        raise InvalidInput("mounts must be a mapping of mount point to scope")
    table: dict[str, str] = {}
    for point, scope in mounts.items():
        if not isinstance(point, str) or not isinstance(scope, str):
            raise InvalidInput(f"a mount is a path and a scope, both strings, got {point!r}: {scope!r}")
        try:
            canonical = canonicalize(point, root, max_path_length)
        except PathError as exc:
            raise InvalidInput(f"mount point {point!r}: {exc.text}") from None
        if canonical != point.rstrip("/"):
            raise InvalidInput(f"mount point {point!r} must be canonical ({canonical!r})")
        if canonical in table:
            raise InvalidInput(f"mount point {canonical!r} is given twice")
        table[canonical] = check_name(scope, "scope")
    if root in table and root_scope is not None and table[root] != root_scope:
        raise InvalidInput(f"the root {root} is mounted on {table[root]!r} and scope= says {root_scope!r}: give one")
    if root not in table:
        table[root] = home if root_scope is None else root_scope
    scopes = list(table.values())
    for scope in scopes:
        if scopes.count(scope) > 1:
            raise InvalidInput(f"scope {scope!r} is mounted twice: each scope has one mount point")
    ordered = sorted(table.items(), key=lambda item: (-item[0].count("/"), item[0]))
    return tuple(Mount(point, scope) for point, scope in ordered)


class MountTable(Layout):
    """The layout of a server with mounts: each agent sees the mounts it may read, and the root's."""

    def tree(self, may_read: Callable[[str], bool]) -> Tree:
        return Tree(self.root, [m for m in self.table if m.point == self.root or may_read(m.scope)])
