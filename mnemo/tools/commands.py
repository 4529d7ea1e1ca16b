"""The memory tool's six commands, written once: view, create, str_replace, insert, delete and rename;
and the search of its files (search.py, docs/MEMORY_TOOL.md §11), which the MCP server and the SDK offer
beside them.

`Commands` runs them over a `Layout` (which scope holds each path: one scope at the root, or a mount
table) with a server's `Settings` (its size limits, quotas and echo limit), and answers with the texts
of docs/MEMORY_TOOL.md and docs/MOUNTS.md. Every file is one live record tagged `memorytool` and
`path:{stored path}` in its scope; directories are implicit. Every command runs inside one
`client.transaction()` (a view on a read-only client reads without one), so its reads and writes happen
under the writer lock and its writes commit as one frame: a rename or delete of a whole directory is
all or nothing, and two processes editing one file never lose an update. A command that is refused
raises `Refusal` inside the transaction, so nothing is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mnemo.errors import NotFound
from mnemo.storage.gc_pause import gc_paused
from mnemo.tools.files import BINARY_TEXT, Refusal, Settings
from mnemo.tools.layout import Mount, Tree
from mnemo.tools.paths import MEMORY_TAG, is_within, path_tag, retagged
from mnemo.tools.search import Search
from mnemo.tools.text import (
    EDITED,
    CommandResult,
    echo,
    format_directory_view,
    format_file_view,
    insert_text,
    occurrence_list,
    replace_snippet,
)
from mnemo.tools.writing import Writing

if TYPE_CHECKING:
    from mnemo.record import MemoryRecord, RecordInfo

__all__ = ["BINARY_TEXT", "CLEARED", "FIXED_TEXT", "HOLDS_TEXT", "Commands", "Refusal", "Settings"]

CLEARED = "All memory cleared"
# delete and rename of a mount point, or of a directory above one (docs/MOUNTS.md §5)
FIXED_TEXT = "Error: Cannot {verb} the {point} directory itself"
HOLDS_TEXT = "Error: Cannot {verb} {path}: it holds the mount point {point}"


class Commands(Writing, Search):
    """The six commands (and `clear_all`, `history`) over a layout, for one client and its settings: the
    files they read (files.py), each in a transaction that checks the quotas (writing.py), and the search
    (search.py)."""

    # -- the commands -----------------------------------------------------------------------------

    def run(self, command: str, fields: dict[str, Any]) -> CommandResult:
        """One command whose input passed the checks of docs/MEMORY_TOOL.md §2; `Refusal` if refused."""
        if command == "view":
            return self._view(fields["path"], fields.get("view_range"))
        if command == "create":
            return self._create(fields["path"], fields["file_text"])
        if command == "str_replace":
            return self._str_replace(fields["path"], fields["old_str"], fields.get("new_str", ""))
        if command == "insert":
            return self._insert(fields["path"], fields["insert_line"], fields["insert_text"])
        if command == "delete":
            return self._delete(fields["path"])
        return self._rename(fields["old_path"], fields["new_path"])

    def _check_size(self, sent_path: str, size: int) -> None:
        limit = self._settings.max_file_bytes
        if size > limit:
            raise Refusal(f"Error: File {sent_path} would be {size} bytes, over the limit of {limit} bytes")
    def _view(self, path: str, view_range: list[int] | None) -> CommandResult:
        canonical = self._canonical(path)
        max_chars = self._settings.max_view_chars
        # A directory's listing builds a few objects per file and no cycles: the pause spares it the
        # cyclic collector's passes over everything else the process holds (a third of a 300-file view).
        with gc_paused(), self._reading():
            tree = self._tree()
            mount = tree.owner(canonical)
            self._permit("read", mount.scope)
            info = self._file(tree, mount, canonical)
            if info is not None:
                content, _ = self._read(info)
                return format_file_view(path, content, view_range, max_chars)
            files = self._sizes_listing(tree, mount, canonical)
            held = [p for p in tree.held if p != canonical and is_within(p, canonical)]
            if not files and not held and canonical != mount.point:
                raise Refusal(f"The path {path} does not exist. Please provide a valid path.")
            return CommandResult(format_directory_view(path, canonical, files, max_chars, held))

    def _create(self, path: str, file_text: str) -> CommandResult:
        canonical = self._canonical(path)
        size = len(file_text.encode("utf-8"))
        with self._writing():
            tree = self._tree()
            mount = tree.owner(canonical)
            self._permit("write", mount.scope)
            taken, blocker = self._use(tree, mount, canonical)
            # a file this agent reads is there: it is overwritten, or the create refused (no file: no look)
            existing = self._file(tree, mount, canonical) if taken else None
            if existing is not None:
                if not self._settings.create_overwrites:
                    raise Refusal(f"Error: File {path} already exists")
                self._check_size(path, size)
                self._check_quotas(
                    mount.scope, f"create {path}", live_delta=size - existing.size, history_delta=size,
                    versioned=[(canonical, existing.version)],
                )
                self._client.update(existing.id, content=file_text, expected_version=existing.version)
                return CommandResult(f"File created successfully at: {path}")
            if taken:
                raise Refusal(f"Error: File {path} already exists")
            if blocker is not None:
                raise Refusal(f"Error: Cannot create {path}: {blocker} is a file")
            self._check_size(path, size)
            self._check_quotas(mount.scope, f"create {path}", new_files=1, live_delta=size, history_delta=size)
            tags = (MEMORY_TAG, path_tag(tree.stored(mount, canonical)))
            self._client.remember(file_text, tags=tags, scope=mount.scope)
        return CommandResult(f"File created successfully at: {path}")

    def _rewrite(self, path: str, canonical: str, mount: Mount, info: RecordInfo, version: int, text: str) -> None:
        """An edit's write: `text` in place of version `version` of the file, within the size of a file
        and the scope's quotas."""
        size = len(text.encode("utf-8"))
        self._check_size(path, size)
        self._check_quotas(
            mount.scope, f"edit {path}", live_delta=size - info.size, history_delta=size,
            versioned=[(canonical, version)],
        )
        self._client.update(info.id, content=text, expected_version=version)
    def _edited(self, path: str, canonical: str, missing: str) -> tuple[Mount, RecordInfo]:
        """The file an edit changes, in the edit's transaction; refused if no readable file is there."""
        tree = self._tree()
        mount = tree.owner(canonical)
        self._permit("write", mount.scope)
        info = self._file(tree, mount, canonical)
        if info is None:
            if self._is_dir(tree, mount, canonical):
                raise Refusal(f"Error: The path {path} is not a file.")
            raise Refusal(missing)
        return mount, info

    def _str_replace(self, path: str, old_str: str, new_str: str) -> CommandResult:
        canonical = self._canonical(path)  # the path checks come before the transaction
        with self._writing():
            mount, info = self._edited(
                path, canonical, f"Error: The path {path} does not exist. Please provide a valid path."
            )
            if old_str == "":
                raise Refusal("Error: `old_str` must not be empty")
            content, version = self._read(info, edited=path)
            pos = content.find(old_str)
            quoted = echo(old_str, self._settings.echo)
            if pos == -1:
                raise Refusal(f"No replacement was performed, old_str `{quoted}` did not appear verbatim in {path}.")
            if content.find(old_str, pos + len(old_str)) != -1:
                raise Refusal(
                    f"No replacement was performed. Multiple occurrences of old_str `{quoted}` in lines: "
                    f"{occurrence_list(content, old_str)}. Please ensure it is unique"
                )
            new_content = content[:pos] + new_str + content[pos + len(old_str) :]
            self._rewrite(path, canonical, mount, info, version, new_content)
        line = content.count("\n", 0, pos)
        return CommandResult(replace_snippet(new_content, line, EDITED, self._settings.max_view_chars))

    def _insert(self, path: str, insert_line: int, text: str) -> CommandResult:
        canonical = self._canonical(path)
        with self._writing():
            mount, info = self._edited(path, canonical, f"Error: The path {path} does not exist")
            content, version = self._read(info, edited=path)
            new_content = insert_text(content, insert_line, text)
            if isinstance(new_content, int):
                raise Refusal(
                    f"Error: Invalid `insert_line` parameter: {insert_line}. It should be within the range "
                    f"of lines of the file: [0, {new_content}]"
                )
            self._rewrite(path, canonical, mount, info, version, new_content)
        return CommandResult(f"The file {path} has been edited.")

    def _fixed(self, tree: Tree, mount: Mount, canonical: str, sent: str, verb: str) -> None:
        """Refuse to delete or rename the root, a mount point, or a directory that holds one."""
        if canonical == self._root or canonical == mount.point:
            raise Refusal(FIXED_TEXT.format(verb=verb, point=canonical))
        if canonical in tree.held:
            raise Refusal(HOLDS_TEXT.format(verb=verb, path=sent, point=tree.held[canonical]))

    def _delete(self, path: str) -> CommandResult:
        canonical = self._canonical(path)
        # A directory's delete builds an object or two per file and no cycles: without the pause, the
        # cyclic collector rescans everything the index holds over and over, more the larger it is.
        with gc_paused(), self._writing():
            tree = self._tree()
            mount = tree.owner(canonical)
            self._permit("forget", mount.scope)
            self._fixed(tree, mount, canonical, path, "delete")
            info = self._file(tree, mount, canonical)
            ids = [info.id] if info is not None else [i.id for i, _ in self._files_beneath(tree, mount, canonical)]
            if not ids:
                raise Refusal(f"Error: The path {path} does not exist")
            self._client.forget(ids, reason="memory tool: delete")
        return CommandResult(f"Successfully deleted {path}")

    def _rename(self, old_path: str, new_path: str) -> CommandResult:
        old = self._canonical(old_path)
        new = self._canonical(new_path)
        with self._writing():
            tree = self._tree()
            source, target = tree.owner(old), tree.owner(new)
            self._permit("write", target.scope)
            if source != target:
                self._permit("forget", source.scope)
            self._fixed(tree, source, old, old_path, "rename")
            taken, blocker = self._use(tree, target, new)
            if taken:
                raise Refusal(f"Error: The destination {new_path} already exists")
            found = self._file(tree, source, old)
            moves: list[tuple[RecordInfo, str, str]]  # (record, its tree path, its new tree path)
            if found is not None:
                moves = [(found, old, new)]
            else:
                moves = [(i, p, new + p[len(old) :]) for i, p in self._files_beneath(tree, source, old)]
                if not moves:
                    raise Refusal(f"Error: The path {old_path} does not exist")
            if is_within(new, old):
                raise Refusal(f"Error: Cannot move {old_path} into itself")
            if blocker is not None:
                raise Refusal(f"Error: Cannot create {new_path}: {blocker} is a file")
            moved = sum(info.size for info, _, _ in moves)
            if source == target:
                # A move is a new version of each file, its content written again.
                self._check_quotas(
                    target.scope, f"rename {old_path}", history_delta=moved,
                    versioned=[(p, info.version) for info, p, _ in moves],
                )
                for info, _, to in moves:
                    tags = retagged(info.tags, tree.stored(target, to))
                    self._client.update(info.id, tags=tags, expected_version=info.version)
            else:
                # A record's scope is fixed: a move across mounts is a new record in the target scope and
                # the old one forgotten, in this one commit.
                self._check_quotas(
                    target.scope, f"rename {old_path}", new_files=len(moves), live_delta=moved, history_delta=moved
                )
                for info, _, to in moves:
                    record = self._client.get(info.id)
                    tags = retagged(record.tags, tree.stored(target, to))
                    self._client.remember(record.content, tags=tags, metadata=record.metadata, scope=target.scope)
                self._client.forget([info.id for info, _, _ in moves], reason="memory tool: rename")
        return CommandResult(f"Successfully renamed {old_path} to {new_path}")

    # -- beside the commands ----------------------------------------------------------------------

    def clear_all(self) -> CommandResult:
        """Forget every file of the root's scope under the root (those a mount shadows too), in one commit."""
        root = self._layout.table[-1]
        alone = Tree(self._root, (root,))  # the root's scope as if nothing were mounted on it
        with self._writing():
            self._permit("forget", root.scope)
            self._permit("read", root.scope)  # the store forgets only what its caller may read
            ids = [info.id for info, _ in self._files_beneath(alone, root, self._root)]
            if ids:
                self._client.forget(ids, reason="memory tool: clear all memory")
        return CommandResult(CLEARED)

    def history(self, path: str) -> list[MemoryRecord]:
        """Every version of the file that serves `path`; `InvalidInput` for a refused path, `NotFound`
        when no file is there for this agent."""
        canonical = self.canonical_path(path)
        tree = self._tree()
        info = self._file(tree, tree.owner(canonical), canonical)
        if info is None:
            raise NotFound(f"The path {path} does not exist")
        return self._client.history(info.id)
