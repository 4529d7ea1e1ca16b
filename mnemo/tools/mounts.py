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

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mnemo.acl import check_name
from mnemo.errors import InvalidInput, NotFound, PermissionDenied
from mnemo.tools.paths import (
    MEMORY_TAG,
    PATH_TAG_PREFIX,
    PathError,
    ancestors,
    canonicalize,
    is_within,
    path_tag,
    retagged,
)
from mnemo.tools.quotas import Usage, refusal
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

if TYPE_CHECKING:
    from mnemo.client import MnemoClient
    from mnemo.record import MemoryRecord, RecordInfo
    from mnemo.tools.server import MnemoMemoryToolServer

__all__ = ["FIXED_TEXT", "HOLDS_TEXT", "Mount", "MountedCommands", "check_mounts"]

# delete and rename of a mount point, or of a directory above one (docs/MOUNTS.md §5)
FIXED_TEXT = "Error: Cannot {verb} the {point} directory itself"
HOLDS_TEXT = "Error: Cannot {verb} {path}: it holds the mount point {point}"


@dataclass(frozen=True)
class Mount:
    """A scope mounted at a canonical path of the tree."""

    point: str
    scope: str


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


class _Refusal(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class _Tree:
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

    def shown(self, mount: Mount, path: str) -> bool:
        """Whether a file of `mount`'s scope at tree path `path` is seen: not beneath a deeper mount,
        nor where a directory holding a mount point is."""
        return self.owner(path) == mount and path not in self.held

    def mounts_beneath(self, directory: str) -> list[Mount]:
        return [m for m in self.visible if m.point != directory and is_within(m.point, directory)]


class MountedCommands:
    """The six commands over a mount table, for `MnemoMemoryToolServer(mounts=...)`."""

    def __init__(self, server: MnemoMemoryToolServer, mounts: tuple[Mount, ...]) -> None:
        self._server = server
        self._client: MnemoClient = server.client
        self._root = server.root
        self._mounts = mounts
        self._by_scope = {m.scope: m for m in mounts}
        self._usage_at: dict[str, tuple[tuple[int, str], Usage]] = {}
        self._planned: list[tuple[str, tuple[int, str], Usage]] = []

    @property
    def mounts(self) -> dict[str, str]:
        return {m.point: m.scope for m in sorted(self._mounts, key=lambda m: m.point)}

    # -- the tree ---------------------------------------------------------------------------------

    def _may(self, perm: str, scope: str) -> bool:
        try:
            self._client.check_permission(perm, scope)
        except PermissionDenied:
            return False
        return True

    def _tree(self) -> _Tree:
        visible = [m for m in self._mounts if m.point == self._root or self._may("read", m.scope)]
        return _Tree(self._root, visible)

    def _permit(self, perm: str, scope: str) -> None:
        if not self._may(perm, scope):
            agent = self._client.agent_id
            raise _Refusal(f"Error: Permission denied: {agent} may not {perm} in scope {scope}")

    def scope_of(self, path: str) -> str:
        """The scope that serves `path` (canonical) for this agent now."""
        return self._tree().owner(path).scope

    def version_path(self, record: MemoryRecord) -> str:
        """The tree path a version of a record had (its scope's mount point plus its stored path)."""
        stored = next((t[len(PATH_TAG_PREFIX) :] for t in record.tags if t.startswith(PATH_TAG_PREFIX)), "?")
        mount = self._by_scope.get(record.scope)
        if mount is None or not is_within(stored, self._root):
            return stored
        return mount.point + stored[len(self._root) :]

    # -- store access -----------------------------------------------------------------------------

    def _file(self, tree: _Tree, mount: Mount, path: str) -> RecordInfo | None:
        if path in tree.held or path == mount.point:
            return None
        tag = path_tag(tree.stored(mount, path))
        found = [i for i in self._client.list_records(tags=(tag,), scope=mount.scope) if MEMORY_TAG in i.tags]
        return max(found, key=lambda info: info.seq) if found else None

    def _files_beneath(self, tree: _Tree, mount: Mount, directory: str) -> Iterator[tuple[RecordInfo, str]]:
        """The readable files of `mount` strictly beneath tree directory `directory`, with tree paths."""
        prefix = path_tag(tree.stored(mount, directory)) + "/"
        for info in self._client.list_records(tag_prefix=prefix, scope=mount.scope):
            if MEMORY_TAG not in info.tags:
                continue
            for tag in info.tags:
                if tag.startswith(prefix):
                    path = tree.listed(mount, tag[len(PATH_TAG_PREFIX) :])
                    if tree.shown(mount, path):
                        yield info, path
                    break

    def _is_dir(self, tree: _Tree, mount: Mount, path: str) -> bool:
        if path in tree.held or path == mount.point:
            return True
        return next(self._files_beneath(tree, mount, path), None) is not None

    def _taken(self, tree: _Tree, mount: Mount, path: str) -> bool:
        """A file or a directory at `path`, counting files of the scope this agent cannot read."""
        if path in tree.held or path == mount.point:
            return True
        stored = tree.stored(mount, path)
        client = self._client
        return client.scope_has(mount.scope, (path_tag(stored), MEMORY_TAG)) or client.scope_has(
            mount.scope, (MEMORY_TAG,), tag_prefix=path_tag(stored) + "/"
        )

    def _file_under(self, tree: _Tree, mount: Mount, path: str) -> str | None:
        """The ancestor of `path` in `mount` that is a file of its scope, seen or not: a file where a
        directory holding a mount point now is still keeps a directory from being made beneath it."""
        for ancestor in ancestors(path, self._root):
            if not is_within(ancestor, mount.point) or ancestor == mount.point:
                continue
            if self._client.scope_has(mount.scope, (path_tag(tree.stored(mount, ancestor)), MEMORY_TAG)):
                return ancestor
        return None

    def _read(self, info: RecordInfo) -> tuple[str, int]:
        record = self._client.get(info.id)
        content = record.content
        text = content.decode("utf-8", errors="replace") if isinstance(content, bytes) else content
        return text, record.version

    # -- quotas -----------------------------------------------------------------------------------

    def _usage(self, scope: str, head: tuple[int, str]) -> Usage:
        cached = self._usage_at.get(scope)
        if cached is not None and cached[0] == head:
            return cached[1]
        found = self._client.scope_usage(scope, MEMORY_TAG)
        usage = Usage(found.records, found.latest_bytes, found.version_bytes)
        self._usage_at[scope] = (head, usage)
        return usage

    def _check_quotas(
        self,
        scope: str,
        action: str,
        new_files: int = 0,
        live_delta: int = 0,
        history_delta: int = 0,
        versioned: Sequence[tuple[str, int]] = (),
    ) -> None:
        head = self._client._chain_head()  # inside the command's transaction: the log as it stands, locked
        quotas = self._server.quotas
        text = refusal(
            quotas, lambda: self._usage(scope, head), action, new_files, live_delta, history_delta, versioned
        )
        if text is not None:
            raise _Refusal(text)
        self._planned.append((scope, head, Usage(new_files, live_delta, history_delta)))

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """A command's transaction; after it commits, the usage remembered for the scope it wrote is
        carried over to the head it left (a move's source scope is read again next time)."""
        with self._client.transaction():
            self._planned = []
            yield
            planned, self._planned = self._planned, []
            after = self._client._chain_head() if planned else None
        for scope, before, change in planned:
            cached = self._usage_at.get(scope)
            if after is None or cached is None or cached[0] != before:
                self._usage_at.pop(scope, None)
                continue
            now = cached[1]
            self._usage_at[scope] = (
                after,
                Usage(now.files + change.files, now.live_bytes + change.live_bytes,
                      now.history_bytes + change.history_bytes),
            )

    # -- commands ---------------------------------------------------------------------------------

    def run(self, command: str, fields: dict[str, Any]) -> CommandResult:
        """One command whose input passed the checks of docs/MEMORY_TOOL.md §2."""
        try:
            return self._dispatch(command, fields)
        except _Refusal as refused:
            return CommandResult(refused.text, True)

    def _dispatch(self, command: str, f: dict[str, Any]) -> CommandResult:
        if command == "view":
            return self._view(f["path"], f.get("view_range"))
        if command == "create":
            return self._create(f["path"], f["file_text"])
        if command == "str_replace":
            return self._str_replace(f["path"], f["old_str"], f.get("new_str", ""))
        if command == "insert":
            return self._insert(f["path"], f["insert_line"], f["insert_text"])
        if command == "delete":
            return self._delete(f["path"])
        return self._rename(f["old_path"], f["new_path"])

    def _canonical(self, path: str) -> str:
        try:
            return self._server.canonical_path(path)
        except InvalidInput as exc:
            raise _Refusal(f"Error: {exc}") from None

    def _check_size(self, sent_path: str, size: int) -> None:
        limit = self._server.max_file_bytes
        if size > limit:
            raise _Refusal(f"Error: File {sent_path} would be {size} bytes, over the limit of {limit} bytes")

    def _view(self, path: str, view_range: list[int] | None) -> CommandResult:
        canonical = self._canonical(path)
        max_chars = self._server.max_view_chars
        with self._server._reading():
            tree = self._tree()
            mount = tree.owner(canonical)
            self._permit("read", mount.scope)
            info = self._file(tree, mount, canonical)
            if info is not None:
                content, _ = self._read(info)
                return format_file_view(path, content, view_range, max_chars)
            files = [(p, i.size) for i, p in self._files_beneath(tree, mount, canonical)]
            for inner in tree.mounts_beneath(canonical):
                files.extend((p, i.size) for i, p in self._files_beneath(tree, inner, inner.point))
            held = [p for p in tree.held if p != canonical and is_within(p, canonical)]
            if not files and not held and canonical != mount.point:
                raise _Refusal(f"The path {path} does not exist. Please provide a valid path.")
            return CommandResult(format_directory_view(path, canonical, files, max_chars, held))

    def _create(self, path: str, file_text: str) -> CommandResult:
        canonical = self._canonical(path)
        size = len(file_text.encode("utf-8"))
        with self._writing():
            tree = self._tree()
            mount = tree.owner(canonical)
            self._permit("write", mount.scope)
            existing = self._file(tree, mount, canonical)
            if existing is not None:
                if not self._server.create_overwrites:
                    raise _Refusal(f"Error: File {path} already exists")
                self._check_size(path, size)
                self._check_quotas(
                    mount.scope, f"create {path}", live_delta=size - existing.size, history_delta=size,
                    versioned=[(canonical, existing.version)],
                )
                self._client.update(existing.id, content=file_text, expected_version=existing.version)
                return CommandResult(f"File created successfully at: {path}")
            if self._taken(tree, mount, canonical):
                raise _Refusal(f"Error: File {path} already exists")
            blocker = self._file_under(tree, mount, canonical)
            if blocker is not None:
                raise _Refusal(f"Error: Cannot create {path}: {blocker} is a file")
            self._check_size(path, size)
            self._check_quotas(mount.scope, f"create {path}", new_files=1, live_delta=size, history_delta=size)
            tags = (MEMORY_TAG, path_tag(tree.stored(mount, canonical)))
            self._client.remember(file_text, tags=tags, scope=mount.scope)
        return CommandResult(f"File created successfully at: {path}")

    def _edited(self, path: str, missing: str) -> tuple[_Tree, Mount, str, RecordInfo]:
        canonical = self._canonical(path)
        tree = self._tree()
        mount = tree.owner(canonical)
        self._permit("write", mount.scope)
        info = self._file(tree, mount, canonical)
        if info is None:
            if self._is_dir(tree, mount, canonical):
                raise _Refusal(f"Error: The path {path} is not a file.")
            raise _Refusal(missing)
        return tree, mount, canonical, info

    def _str_replace(self, path: str, old_str: str, new_str: str) -> CommandResult:
        self._canonical(path)  # the path checks come before the transaction
        echo_limit = self._server.echo_limit
        with self._writing():
            _, mount, canonical, info = self._edited(
                path, f"Error: The path {path} does not exist. Please provide a valid path."
            )
            if old_str == "":
                raise _Refusal("Error: `old_str` must not be empty")
            content, version = self._read(info)
            pos = content.find(old_str)
            quoted = echo(old_str, echo_limit)
            if pos == -1:
                raise _Refusal(f"No replacement was performed, old_str `{quoted}` did not appear verbatim in {path}.")
            if content.find(old_str, pos + len(old_str)) != -1:
                raise _Refusal(
                    f"No replacement was performed. Multiple occurrences of old_str `{quoted}` in lines: "
                    f"{occurrence_list(content, old_str)}. Please ensure it is unique"
                )
            new_content = content[:pos] + new_str + content[pos + len(old_str) :]
            size = len(new_content.encode("utf-8"))
            self._check_size(path, size)
            self._check_quotas(
                mount.scope, f"edit {path}", live_delta=size - info.size, history_delta=size,
                versioned=[(canonical, version)],
            )
            self._client.update(info.id, content=new_content, expected_version=version)
        line = content.count("\n", 0, pos)
        return CommandResult(replace_snippet(new_content, line, EDITED, self._server.max_view_chars))

    def _insert(self, path: str, insert_line: int, text: str) -> CommandResult:
        self._canonical(path)
        with self._writing():
            _, mount, canonical, info = self._edited(path, f"Error: The path {path} does not exist")
            content, version = self._read(info)
            new_content = insert_text(content, insert_line, text)
            if isinstance(new_content, int):
                raise _Refusal(
                    f"Error: Invalid `insert_line` parameter: {insert_line}. It should be within the range "
                    f"of lines of the file: [0, {new_content}]"
                )
            size = len(new_content.encode("utf-8"))
            self._check_size(path, size)
            self._check_quotas(
                mount.scope, f"edit {path}", live_delta=size - info.size, history_delta=size,
                versioned=[(canonical, version)],
            )
            self._client.update(info.id, content=new_content, expected_version=version)
        return CommandResult(f"The file {path} has been edited.")

    def _fixed(self, tree: _Tree, mount: Mount, canonical: str, sent: str, verb: str) -> None:
        """Refuse to delete or rename the root, a mount point, or a directory that holds one."""
        if canonical == self._root or canonical == mount.point:
            raise _Refusal(FIXED_TEXT.format(verb=verb, point=canonical))
        if canonical in tree.held:
            raise _Refusal(HOLDS_TEXT.format(verb=verb, path=sent, point=tree.held[canonical]))

    def _delete(self, path: str) -> CommandResult:
        canonical = self._canonical(path)
        with self._writing():
            tree = self._tree()
            mount = tree.owner(canonical)
            self._permit("forget", mount.scope)
            self._fixed(tree, mount, canonical, path, "delete")
            info = self._file(tree, mount, canonical)
            ids = [info.id] if info is not None else [i.id for i, _ in self._files_beneath(tree, mount, canonical)]
            if not ids:
                raise _Refusal(f"Error: The path {path} does not exist")
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
            if self._taken(tree, target, new):
                raise _Refusal(f"Error: The destination {new_path} already exists")
            found = self._file(tree, source, old)
            moves: list[tuple[RecordInfo, str, str]]  # (record, its tree path, its new tree path)
            if found is not None:
                moves = [(found, old, new)]
            else:
                moves = [(i, p, new + p[len(old) :]) for i, p in self._files_beneath(tree, source, old)]
                if not moves:
                    raise _Refusal(f"Error: The path {old_path} does not exist")
            if is_within(new, old):
                raise _Refusal(f"Error: Cannot move {old_path} into itself")
            blocker = self._file_under(tree, target, new)
            if blocker is not None:
                raise _Refusal(f"Error: Cannot create {new_path}: {blocker} is a file")
            moved = sum(info.size for info, _, _ in moves)
            if source == target:
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

    def history(self, path: str) -> list[MemoryRecord]:
        """Every version of the file that serves `path`; `InvalidInput` for a refused path, `NotFound`
        when no file is there for this agent."""
        canonical = self._server.canonical_path(path)
        tree = self._tree()
        info = self._file(tree, tree.owner(canonical), canonical)
        if info is None:
            raise NotFound(f"The path {path} does not exist")
        return self._client.history(info.id)
