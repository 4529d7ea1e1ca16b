"""Where the memory tool's files are, for its commands and its search (docs/MEMORY_TOOL.md, docs/MOUNTS.md):
a path's canonical form and the mount that serves it, the file at a path, the files beneath a directory
(no content read), what a path is taken by, a file's text; and the permission checks on the scope that
serves a path.

`Files` reads over a `Layout` (which scope holds each path) with a server's `Settings`; a command that is
refused raises `Refusal` (commands.py runs each inside its transaction, so nothing is written).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from mnemo.errors import InvalidInput, NotFound, PermissionDenied
from mnemo.tools.layout import Layout, Mount, Tree
from mnemo.tools.paths import MEMORY_TAG, PATH_TAG_PREFIX, PathError, canonicalize, is_within, path_tag
from mnemo.tools.quotas import Quotas
from mnemo.tools.text import echo

if TYPE_CHECKING:
    from mnemo.client import MnemoClient
    from mnemo.record import RecordInfo

# str_replace and insert of a file whose content is bytes that are not UTF-8 (written through the client)
BINARY_TEXT = (
    "Error: The file {path} holds bytes that are not UTF-8 text, which an edit would replace for good: it "
    "cannot be edited. View shows it with U+FFFD where the bytes are not text; create a new file instead"
)


class Refusal(Exception):
    """A command ends with an error result; raised inside the transaction so nothing is written."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


@dataclass(frozen=True)
class Settings:
    """What a server allows: file size, result size, path length, how much of a sent value a result
    quotes (`echo`), whether create overwrites, and the quotas. Checked by the server that makes them."""

    max_file_bytes: int
    max_view_chars: int
    max_path_length: int
    echo: int
    create_overwrites: bool
    quotas: Quotas


class Files:
    """The memory tool's files over a layout, for one client and its settings: what the commands and the
    search read of them."""

    def __init__(self, client: MnemoClient, settings: Settings, layout: Layout) -> None:
        self._client = client
        self._settings = settings
        self._layout = layout
        self._root = layout.root

    # -- paths and the tree -----------------------------------------------------------------------

    def canonical_path(self, path: str) -> str:
        """The canonical form of `path`; `InvalidInput` (with the tool's error text) if it is refused.

        `max_path_length` bounds the path a file has in its scope: beneath a mount point the tree path
        may be longer by what the point adds to the root (docs/MOUNTS.md §1), so that every file a
        listing shows can be addressed. The mount is the one that serves the path now."""
        s = self._settings
        extra = self._layout.longest_prefix
        try:
            canonical = canonicalize(path, self._root, s.max_path_length + extra, s.echo)
        except PathError as exc:
            raise InvalidInput(exc.text) from None
        if extra:
            allowed = s.max_path_length + len(self._tree().owner(canonical).point) - len(self._root)
            if len(path) > allowed or len(unicodedata.normalize("NFC", path)) > allowed:
                raise InvalidInput(f"Invalid path: {echo(repr(path), s.echo)}")
        return canonical

    def _canonical(self, path: str) -> str:
        try:
            return self.canonical_path(path)
        except InvalidInput as exc:
            raise Refusal(f"Error: {exc}") from None

    def _may(self, perm: str, scope: str) -> bool:
        try:
            self._client.check_permission(perm, scope)
        except PermissionDenied:
            return False
        return True

    def _may_read(self, scope: str) -> bool:
        return self._may("read", scope)

    def _tree(self) -> Tree:
        return self._layout.tree(self._may_read)

    def _permit(self, perm: str, scope: str) -> None:
        if not self._may(perm, scope):
            agent = self._client.agent_id
            raise Refusal(f"Error: Permission denied: {agent} may not {perm} in scope {scope}")

    def scope_of(self, canonical: str) -> str:
        """The scope that serves canonical path `canonical` for this agent now."""
        return self._tree().owner(canonical).scope

    # -- store access -----------------------------------------------------------------------------

    def _file(self, tree: Tree, mount: Mount, path: str) -> RecordInfo | None:
        """The live file record at tree path `path` in `mount` that this agent may read, if any."""
        if path in tree.held or path == mount.point:
            return None
        # The path tag alone narrows to a handful of records; the memory-tool tag is checked on those.
        tag = path_tag(tree.stored(mount, path))
        found = [i for i in self._client.list_records(tags=(tag,), scope=mount.scope) if MEMORY_TAG in i.tags]
        return max(found, key=lambda info: info.seq) if found else None

    def _files_beneath(self, tree: Tree, mount: Mount, directory: str) -> Iterator[tuple[RecordInfo, str]]:
        """The readable files of `mount` strictly beneath tree directory `directory`, with tree paths (no
        content read): those seen, not beneath a deeper mount nor where a directory holding a mount point is.

        `mount` owns `directory` (every caller's is `tree.owner(directory)`), so only a mount beneath
        `directory` can take a file from it."""
        prefix = path_tag(tree.stored(mount, directory)) + "/"
        infos = self._client.list_records(tag_prefix=prefix, scope=mount.scope)
        yield from _beneath(tree, mount, directory, prefix, ((info.tags, info) for info in infos))

    def _sizes_beneath(self, tree: Tree, mount: Mount, directory: str) -> Iterator[tuple[int, str]]:
        """_files_beneath's files as (size, tree path): what a directory's view shows of each, read
        without making a RecordInfo (and its times) of each."""
        prefix = path_tag(tree.stored(mount, directory)) + "/"
        yield from _beneath(tree, mount, directory, prefix, self._client._tags_and_sizes(prefix, mount.scope))

    def _listing(self, tree: Tree, mount: Mount, directory: str) -> list[tuple[str, RecordInfo]]:
        """Every readable file beneath tree directory `directory` (owned by `mount`), the mounts beneath it
        included, with its tree path: one listing of each mount's scope, no content read."""
        files = [(p, i) for i, p in self._files_beneath(tree, mount, directory)]
        for inner in tree.mounts_beneath(directory):
            files.extend((p, i) for i, p in self._files_beneath(tree, inner, inner.point))
        return files

    def _sizes_listing(self, tree: Tree, mount: Mount, directory: str) -> list[tuple[str, int]]:
        """_listing's files as (tree path, size)."""
        files = [(p, size) for size, p in self._sizes_beneath(tree, mount, directory)]
        for inner in tree.mounts_beneath(directory):
            files.extend((p, size) for size, p in self._sizes_beneath(tree, inner, inner.point))
        return files

    def files(self, path: str) -> list[tuple[str, RecordInfo]]:
        """The file at `path`, or every file beneath the directory at `path`, that this agent sees now,
        each with its tree path, sorted by path (no content read). `InvalidInput` for a refused path,
        `PermissionDenied` when the scope serving the path may not be read, `NotFound` when nothing is
        there (a mount point or a directory above one is there, empty or not)."""
        canonical = self.canonical_path(path)
        with self._reading():
            tree = self._tree()
            mount = tree.owner(canonical)
            if not self._may_read(mount.scope):
                raise PermissionDenied(f"{self._client.agent_id} may not read in scope {mount.scope}")
            info = self._file(tree, mount, canonical)
            found = [(canonical, info)] if info is not None else self._listing(tree, mount, canonical)
        if not found and canonical not in tree.held and canonical != mount.point:
            raise NotFound(f"The path {path} does not exist")
        return sorted(found, key=lambda item: item[0])

    def mounts_seen(self) -> dict[str, str]:
        """The mounts this agent sees now, point -> scope, sorted by point: those whose scope it may read,
        and the root's."""
        return {m.point: m.scope for m in sorted(self._tree().visible, key=lambda m: m.point)}

    def _is_dir(self, tree: Tree, mount: Mount, path: str) -> bool:
        """Whether a directory is at `path`: a mount point, one above it, or a readable file beneath."""
        if path in tree.held or path == mount.point:
            return True
        return next(self._files_beneath(tree, mount, path), None) is not None

    def _use(self, tree: Tree, mount: Mount, path: str) -> tuple[bool, str | None]:
        """Whether a file or a directory is at tree path `path` in `mount`, counting files of its scope this
        agent cannot read; and the ancestor of `path` in `mount` that is a file of its scope, seen or not,
        if any (a file where a directory holding a mount point now is still keeps a directory from being
        made beneath it). One look-up of the scope's files, which `remember` repeats in the same
        transaction."""
        if path in tree.held or path == mount.point:
            return True, None
        use = self._client.path_use(mount.scope, tree.stored(mount, path))
        below_root = [a for a in use.above if is_within(a, tree.root) and a != tree.root]
        return use.file or use.beneath, tree.listed(mount, below_root[0]) if below_root else None

    def _read(self, info: RecordInfo, edited: str | None = None) -> tuple[str, int]:
        """The file's text and version. Content written through the client as bytes is read as UTF-8, with
        U+FFFD where the bytes are not UTF-8; for an edit (`edited`: the path as sent) such bytes are refused
        instead, as the edit would replace them by U+FFFD for good."""
        record = self._client.get(info.id)
        if not isinstance(record.content, bytes):
            return record.content, record.version
        try:
            return record.content.decode("utf-8"), record.version
        except UnicodeDecodeError:
            if edited is None:
                return record.content.decode("utf-8", errors="replace"), record.version
            raise Refusal(BINARY_TEXT.format(path=edited)) from None

    def _reading(self) -> AbstractContextManager[object]:
        if self._client.readonly:
            return nullcontext()
        return self._client.transaction()


T = TypeVar("T")


def _beneath(
    tree: Tree, mount: Mount, directory: str, prefix: str, found: Iterable[tuple[tuple[str, ...], T]]
) -> Iterator[tuple[T, str]]:
    """Of `found`, the (tags, item) of the records `mount`'s scope holds under the path tag prefix
    `prefix` (that of tree directory `directory`), the items of memory-tool files seen at their tree
    paths: not beneath a deeper mount nor where a directory holding a mount point is."""
    deeper = tuple(m.point + "/" for m in tree.mounts_beneath(directory))
    for tags, item in found:
        if MEMORY_TAG not in tags:
            continue
        for tag in tags:
            if tag.startswith(prefix):
                path = tree.listed(mount, tag[len(PATH_TAG_PREFIX) :])
                if path not in tree.held and not path.startswith(deeper):
                    yield item, path
                break
