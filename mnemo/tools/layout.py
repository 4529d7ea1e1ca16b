"""Which scope holds a path of the memory tool's tree: the layout the commands run over.

A layout is a table of mounts, each a scope at a canonical point of the tree, deepest first, the root's
last. A single-scope server's layout is one scope at the root (`SingleScope`); a server with mounts
has a mount table (`mnemo.tools.mounts.MountTable`, docs/MOUNTS.md). A scope's files are stored under
the root as if the scope were mounted there, so every layout over a scope sees the same files. Each
command asks the layout for the `Tree` it sees now: the mounts the agent may read, the root's always
among them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mnemo.tools.paths import PATH_TAG_PREFIX, ancestors, is_within

if TYPE_CHECKING:
    from mnemo.record import MemoryRecord

__all__ = ["Layout", "Mount", "SingleScope", "Tree", "tagged_path"]


@dataclass(frozen=True)
class Mount:
    """A scope mounted at a canonical path of the tree."""

    point: str
    scope: str


def tagged_path(record: MemoryRecord) -> str:
    """The path a version of a file had in its scope (its path tag), or `?` if it has none."""
    return next((t[len(PATH_TAG_PREFIX) :] for t in record.tags if t.startswith(PATH_TAG_PREFIX)), "?")


class Tree:
    """The mounts one command sees: those the agent may read, and the root's."""

    def __init__(self, root: str, visible: Sequence[Mount]) -> None:
        self.root = root
        self.visible = tuple(visible)  # deepest first, the root's last
        # Directories that exist whatever the files: every visible mount point and its ancestors.
        held: dict[str, str] = {}
        for mount in self.visible:
            if mount.point == root:
                continue
            for path in [*ancestors(mount.point, root), mount.point]:
                held.setdefault(path, mount.point)
        held.setdefault(root, root)
        self.held = held  # path -> a mount point at or beneath it

    def owner(self, path: str) -> Mount:
        for mount in self.visible:
            if is_within(path, mount.point):
                return mount
        raise AssertionError(f"{path} is outside the tree")  # the root's mount holds every path

    def stored(self, mount: Mount, path: str) -> str:
        """The path a file at tree path `path` has in its scope."""
        return self.root + path[len(mount.point) :]

    def listed(self, mount: Mount, stored: str) -> str:
        """The tree path of a file stored at `stored` in `mount`'s scope."""
        return mount.point + stored[len(self.root) :]

    def mounts_beneath(self, directory: str) -> list[Mount]:
        return [m for m in self.visible if m.point != directory and is_within(m.point, directory)]


class Layout(ABC):
    """A server's mounts (deepest point first, the root's last) and the tree each agent sees of them."""

    def __init__(self, root: str, mounts: tuple[Mount, ...]) -> None:
        self.root = root
        self.table = mounts
        self._by_scope = {m.scope: m for m in mounts}
        # What the deepest mount point adds to the paths its scope stores: a tree path beneath it may be
        # this much longer than max_path_length, which bounds the stored path (docs/MOUNTS.md §1).
        self.longest_prefix = max(len(m.point) - len(root) for m in mounts)

    @property
    def scope(self) -> str:
        """The root's scope."""
        return self.table[-1].scope

    @property
    def mounts(self) -> dict[str, str]:
        """Mount point -> scope, the root's included, in the order of the points."""
        return {m.point: m.scope for m in sorted(self.table, key=lambda m: m.point)}

    @abstractmethod
    def tree(self, may_read: Callable[[str], bool]) -> Tree:
        """The tree an agent sees now; `may_read(scope)` says whether it may read a scope."""

    def version_path(self, record: MemoryRecord) -> str:
        """The tree path a version of a record had (its scope's mount point plus its stored path)."""
        stored = tagged_path(record)
        mount = self._by_scope.get(record.scope)
        if mount is None or not is_within(stored, self.root):
            return stored
        return mount.point + stored[len(self.root) :]


class SingleScope(Layout):
    """One scope at the root: every path is the scope's, and the tree is the same for every agent."""

    def __init__(self, root: str, scope: str) -> None:
        super().__init__(root, (Mount(root, scope),))
        self._tree = Tree(root, self.table)

    def tree(self, may_read: Callable[[str], bool]) -> Tree:
        return self._tree  # the root's mount is never hidden: a refused read is the command's refusal
