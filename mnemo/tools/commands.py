"""The memory tool's six commands, written once: view, create, str_replace, insert, delete and rename;
and the search of its files (docs/MEMORY_TOOL.md §11), which the MCP server and the SDK offer beside them.

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

import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from mnemo.client import MAX_RECALL
from mnemo.errors import InvalidInput, NotFound, PermissionDenied
from mnemo.recall.embedding import MODES
from mnemo.recall.query import parse as parse_query
from mnemo.storage.gc_pause import gc_paused
from mnemo.tools.layout import Layout, Mount, Tree, tagged_path
from mnemo.tools.paths import (
    MEMORY_TAG,
    PATH_TAG_PREFIX,
    PathError,
    canonicalize,
    is_within,
    path_tag,
    retagged,
)
from mnemo.tools.quotas import Quotas, Usage, refusal
from mnemo.tools.text import (
    EDITED,
    CommandResult,
    echo,
    echo_sent,
    format_directory_view,
    format_file_view,
    format_search,
    insert_text,
    occurrence_list,
    replace_snippet,
)

if TYPE_CHECKING:
    from mnemo.client import MnemoClient
    from mnemo.record import MemoryRecord, Recalled, RecordInfo

__all__ = ["BINARY_TEXT", "CLEARED", "FIXED_TEXT", "HOLDS_TEXT", "Commands", "Refusal", "Settings"]

CLEARED = "All memory cleared"
# delete and rename of a mount point, or of a directory above one (docs/MOUNTS.md §5)
FIXED_TEXT = "Error: Cannot {verb} the {point} directory itself"
HOLDS_TEXT = "Error: Cannot {verb} {path}: it holds the mount point {point}"
# str_replace and insert of a file whose content is bytes that are not UTF-8 (written through the client)
BINARY_TEXT = (
    "Error: The file {path} holds bytes that are not UTF-8 text, which an edit would replace for good: it "
    "cannot be edited. View shows it with U+FFFD where the bytes are not text; create a new file instead"
)

_Head = tuple[int, str]  # a log head, (seq, hash): what a remembered usage holds for


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


class Commands:
    """The six commands (and `clear_all`, `history`) over a layout, for one client and its settings."""

    def __init__(self, client: MnemoClient, settings: Settings, layout: Layout) -> None:
        self._client = client
        self._settings = settings
        self._layout = layout
        self._root = layout.root
        # Per scope, its usage and the log head it holds for; a write by anyone moves the head.
        self._usage_at: dict[str, tuple[_Head, Usage]] = {}
        self._planned: list[tuple[str, _Head, Usage]] = []

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

    # -- quotas and transactions ------------------------------------------------------------------

    def _usage(self, scope: str, head: _Head) -> Usage:
        """The scope's usage as of `head`: remembered from this server's last write if nothing was
        written since, else read from the index (one pass over the memory-tool records)."""
        cached = self._usage_at.get(scope)
        if cached is not None and cached[0] == head:
            return cached[1]
        found = self._client.scope_usage(scope, MEMORY_TAG, PATH_TAG_PREFIX + self._root + "/")
        usage = Usage(found.records, found.latest_bytes, found.version_bytes)
        self._usage_at[scope] = (head, usage)
        return usage

    def _check_quotas(
        self,
        scope: str,
        action: str,
        *,
        history_delta: int,  # every write keeps a version: no default, so no caller leaves it out
        new_files: int = 0,
        live_delta: int = 0,
        versioned: Sequence[tuple[str, int]] = (),
    ) -> None:
        """Refuse the write if a quota forbids it; else note its change of usage for `_writing`."""
        head = self._client._chain_head()  # inside the command's transaction: the log as it stands, locked
        quotas = self._settings.quotas
        text = refusal(
            quotas, lambda: self._usage(scope, head), action, new_files, live_delta, history_delta, versioned,
            readable=self._may_read(scope),
        )
        if text is not None:
            raise Refusal(text)
        self._planned.append((scope, head, Usage(new_files, live_delta, history_delta)))

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """A command's transaction. After it commits, the usage remembered for each scope it wrote is
        carried over, with the change the command made, to the head it left (else forgotten)."""
        with self._client.transaction():
            self._planned = []
            yield
            planned, self._planned = self._planned, []
            after = self._client._chain_head() if planned else None  # the head this commit leaves
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

    def _reading(self) -> AbstractContextManager[object]:
        if self._client.readonly:
            return nullcontext()
        return self._client.transaction()

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

    # -- the search --------------------------------------------------------------------------------

    def search(self, query: str, path: str | None, limit: int, mode: str | None = None) -> CommandResult:
        """The files under `path` (default: the root) whose content best matches `query`, at most
        `limit` of them, best first, with their matching lines (docs/MEMORY_TOOL.md §11), matched in
        `mode` (None: the client's default). Checked in the tool's order: the path, the query's syntax,
        the mode, `read` in the scope that serves the path, the path's existence. A file's path searches
        that file alone."""
        sent = self._root if path is None else path
        found, more = self.matches(query, path, limit, mode)
        files = []
        for tree_path, hit in found:
            content = hit.record.content
            lines = content.split("\n") if isinstance(content, str) else []  # recall finds text only
            files.append((tree_path, [(n, text, len(lines[n - 1])) for n, text in hit.lines]))
        settings = self._settings
        return CommandResult(format_search(sent, query, files, more, settings.max_view_chars, settings.echo))

    def matches(
        self, query: str, path: str | None, limit: int, mode: str | None = None
    ) -> tuple[list[tuple[str, Recalled]], bool]:
        """What `search` shows, before it is put into words: the best `limit` files with their tree
        paths and recall's hits, best first, and whether more matched. Checked as `search` is; a refusal
        is `Refusal` with the tool's text."""
        sent = self._root if path is None else path
        canonical = self._canonical(sent)
        try:
            parse_query(query)
        except InvalidInput as exc:
            raise Refusal(f"Error: Invalid query: {exc}") from None
        if mode is not None and mode not in MODES:
            raise Refusal(f"Error: Invalid mode: {echo_sent(mode, self._settings.echo)}; use one of {', '.join(MODES)}")
        if mode not in (None, "lexical") and self._client.embedder is None:
            raise Refusal(f"Error: Invalid mode: {mode} needs an embedder, and this memory has none; "
                          "search with mode lexical (by words)")
        with self._reading():
            tree = self._tree()
            mount = tree.owner(canonical)
            self._permit("read", mount.scope)
            found = self._found(tree, mount, canonical, sent, query, limit + 1, mode)
        return found[:limit], len(found) > limit

    def _found(
        self, tree: Tree, mount: Mount, canonical: str, sent: str, query: str, want: int, mode: str | None = None
    ) -> list[tuple[str, Recalled]]:
        """The files at or beneath `canonical` that best match `query` (at least the best `want` of them,
        when there are so many), with their tree paths, best first (equal scores newest first). Each
        shown mount's files are ranked in its own scope, and the mounts' rankings merged by score."""
        file = self._file(tree, mount, canonical)
        if file is not None:
            tags = (MEMORY_TAG, path_tag(tree.stored(mount, canonical)))
            hits = self._client.recall(query, scope=mount.scope, tags=tags, limit=want, mode=mode)
            return [(canonical, hit) for hit in hits if hit.record.id == file.id]
        if not self._is_dir(tree, mount, canonical):
            raise Refusal(f"The path {sent} does not exist. Please provide a valid path.")
        found = self._recall_in(tree, mount, path_tag(tree.stored(mount, canonical)) + "/", query, want, mode)
        for inner in tree.mounts_beneath(canonical):
            found.extend(self._recall_in(tree, inner, path_tag(self._root) + "/", query, want, mode))
        found.sort(key=lambda item: (-item[1].score, -item[1].record.seq))
        return found

    def _recall_in(
        self, tree: Tree, mount: Mount, prefix: str, query: str, want: int, mode: str | None = None
    ) -> list[tuple[str, Recalled]]:
        """The best files of `mount` whose path tag starts with `prefix` that the tree shows (not
        shadowed by a deeper mount, nor at a fixed directory), with their tree paths: the best `want` of
        them at least, when there are so many. The path filter is the recall's own, so it applies before
        the limit; should shadowed files take places, the recall is asked again for twice as many.
        Precondition: `want <= MAX_RECALL`."""
        ask = want
        while True:
            hits = self._client.recall(query, scope=mount.scope, tags=(MEMORY_TAG,), tag_prefix=prefix, limit=ask,
                                       mode=mode)
            kept = []
            for hit in hits:
                tree_path = tree.listed(mount, tagged_path(hit.record))
                if tree_path not in tree.held and tree.owner(tree_path) == mount:
                    kept.append((tree_path, hit))
            if len(kept) >= want or len(hits) < ask or ask == MAX_RECALL:
                return kept
            ask = min(MAX_RECALL, 2 * ask)

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
