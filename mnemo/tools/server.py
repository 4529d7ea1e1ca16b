"""`MnemoMemoryToolServer`: Anthropic's client-side memory tool (`memory_20250818`) served from Mnemo.

The contract is docs/MEMORY_TOOL.md, string for string. Every file is one live record tagged
`memorytool` and `path:{canonical path}` in the server's scope; directories are implicit. Every
command runs inside one `client.transaction()` (a view on a read-only client reads without one), so
its reads and writes happen under the writer lock and its writes commit as one frame: a rename or delete
of a whole directory is all or nothing, and two processes editing one file never lose an update.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from mnemo.acl import check_name
from mnemo.errors import InvalidInput, LockTimeout, MnemoError, NotFound, PermissionDenied, ReadOnly
from mnemo.storage.gc_pause import gc_paused
from mnemo.tools.inputs import read_block, validate_input
from mnemo.tools.mounts import MountedCommands, check_mounts
from mnemo.tools.paths import (
    DEFAULT_MAX_PATH_LENGTH,
    DEFAULT_ROOT,
    MEMORY_TAG,
    PATH_TAG_PREFIX,
    PathError,
    ancestors,
    canonicalize,
    check_root,
    is_within,
    path_tag,
    retagged,
)
from mnemo.tools.quotas import Quotas, Usage, refusal
from mnemo.tools.text import (
    EDITED,
    CommandResult,
    cut_to,
    echo,
    format_directory_view,
    format_file_view,
    format_size,
    insert_text,
    occurrence_lines,
    occurrence_list,
    replace_snippet,
)

if TYPE_CHECKING:
    from mnemo.client import MnemoClient
    from mnemo.record import MemoryRecord, RecordInfo

__all__ = [
    "MEMORY_TAG",
    "TOOL_NAME",
    "TOOL_TYPE",
    "CommandResult",
    "MnemoMemoryToolServer",
    "format_directory_view",
    "format_file_view",
    "format_size",
    "insert_text",
    "occurrence_lines",
    "replace_snippet",
    "validate_input",
]

log = logging.getLogger("mnemo.tools")

TOOL_TYPE = "memory_20250818"
TOOL_NAME = "memory"
MANAGED_AGENTS_BETA = "managed-agents-2026-04-01"
DEFAULT_MAX_FILE_BYTES = 1 << 20
DEFAULT_MAX_VIEW_CHARS = 16_000
# Room a result needs beside the two values it may echo (docs/MEMORY_TOOL.md §3).
RESULT_OVERHEAD_CHARS = 1024
CLEARED = "All memory cleared"
INTERNAL_ERROR = "Error: Internal error"
_TYPE_NAME = type.__dict__["__name__"]  # a class's own name, whatever its metaclass claims


class _Refusal(Exception):
    """A command ends with an error result; raised inside the transaction so nothing is written."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _as_text(content: str | bytes) -> str:
    if isinstance(content, bytes):
        return content.decode("utf-8", errors="replace")
    return content


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8"))


class MnemoMemoryToolServer:
    """Serves the memory tool's six commands from a `MnemoClient`, in one scope, under one root.

    `handle(tool_use)` takes a `tool_use` block (a dict or an SDK content block) and returns the
    `tool_result` block to send back; it never raises. `execute(input)` runs one command's input and
    returns a `CommandResult`; the SDK adapter in `mnemo.tools.anthropic` is built on it. Every result
    text is at most `max_view_chars` characters. The quotas (`max_files`, `max_total_bytes`,
    `max_history_bytes`, `max_versions_per_file`; `None` disables one) bound what the scope's files
    hold; docs/MEMORY_TOOL.md §10 says what each costs and refuses.
    """

    def __init__(
        self,
        client: MnemoClient,
        root: str = DEFAULT_ROOT,
        scope: str | None = None,
        managed_agents_beta: bool = False,
        create_overwrites: bool = False,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        max_view_chars: int = DEFAULT_MAX_VIEW_CHARS,
        max_path_length: int = DEFAULT_MAX_PATH_LENGTH,
        *,
        max_files: int | None = Quotas.max_files,
        max_total_bytes: int | None = Quotas.max_total_bytes,
        max_history_bytes: int | None = Quotas.max_history_bytes,
        max_versions_per_file: int | None = Quotas.max_versions_per_file,
        mounts: Mapping[str, str] | None = None,
    ) -> None:
        for name, value in (
            ("max_file_bytes", max_file_bytes),
            ("max_view_chars", max_view_chars),
            ("max_path_length", max_path_length),
        ):
            if type(value) is not int or value < 1:
                raise InvalidInput(f"{name} must be a positive integer, got {value!r}")
        try:
            self._root = check_root(root)
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
        if len(self._root) >= max_path_length:
            raise InvalidInput(f"root {root!r} leaves no room below max_path_length ({max_path_length})")
        limits = client.limits
        if max_file_bytes > limits.max_content_bytes:
            raise InvalidInput(
                f"max_file_bytes ({max_file_bytes}) is over the client's content limit "
                f"(client.limits.max_content_bytes = {limits.max_content_bytes}): such a file could not be stored"
            )
        if max_path_length + len(PATH_TAG_PREFIX) > limits.max_tag_chars:
            raise InvalidInput(
                f"max_path_length ({max_path_length}) does not fit in a path tag: the client's tag limit "
                f"(client.limits.max_tag_chars = {limits.max_tag_chars}) allows paths of at most "
                f"{limits.max_tag_chars - len(PATH_TAG_PREFIX)} characters"
            )
        least = 2 * max_path_length + RESULT_OVERHEAD_CHARS
        if max_view_chars < least:
            raise InvalidInput(
                f"max_view_chars must be at least 2 * max_path_length + {RESULT_OVERHEAD_CHARS} = {least}"
                f" (a result may echo two paths), got {max_view_chars}"
            )
        self._client = client
        self._scope = client.home_scope if scope is None else check_name(scope, "scope")  # exact, never a pattern
        self._mounted: MountedCommands | None = None
        if mounts is not None:
            given = None if scope is None else self._scope
            table = check_mounts(mounts, self._root, given, client.home_scope, max_path_length)
            self._scope = table[-1].scope  # the root's
            self._mounted = MountedCommands(self, table)
        self._managed_agents_beta = bool(managed_agents_beta)
        self._create_overwrites = bool(create_overwrites)
        self._max_file_bytes = max_file_bytes
        self._max_view_chars = max_view_chars
        self._max_path_length = max_path_length
        # Each echoed value gets half of what the fixed text leaves, so that two always fit.
        self._echo = (max_view_chars - RESULT_OVERHEAD_CHARS) // 2
        self._quotas = Quotas(
            max_versions_per_file=max_versions_per_file,
            max_files=max_files,
            max_total_bytes=max_total_bytes,
            max_history_bytes=max_history_bytes,
        )
        # The scope's usage and the log head it holds for; a write by anyone moves the head.
        self._usage_at: tuple[tuple[int, str], Usage] | None = None
        self._planned: tuple[tuple[int, str], Usage] | None = None

    # -- public API ---------------------------------------------------------------------------------

    @property
    def client(self) -> MnemoClient:
        return self._client

    @property
    def root(self) -> str:
        return self._root

    @property
    def scope(self) -> str:
        return self._scope

    @property
    def quotas(self) -> Quotas:
        return self._quotas

    @property
    def mounts(self) -> dict[str, str]:
        """Mount point -> scope, the root's included (`{root: scope}` for a single-scope server)."""
        return {self._root: self._scope} if self._mounted is None else self._mounted.mounts

    @property
    def create_overwrites(self) -> bool:
        return self._create_overwrites

    @property
    def max_file_bytes(self) -> int:
        return self._max_file_bytes

    @property
    def echo_limit(self) -> int:
        """How many characters of a value the model sent a message quotes whole (docs/MEMORY_TOOL.md §3.1)."""
        return self._echo

    def scope_of(self, path: str) -> str:
        """The scope that serves `path` for this agent now: the server's, or with mounts the scope of the
        longest mount point above it that the agent may read. `InvalidInput` for a refused path."""
        canonical = self.canonical_path(path)
        return self._scope if self._mounted is None else self._mounted.scope_of(canonical)

    def version_path(self, record: MemoryRecord) -> str:
        """The path a version of a file had, as this server lists it."""
        if self._mounted is not None:
            return self._mounted.version_path(record)
        return next((t[len(PATH_TAG_PREFIX) :] for t in record.tags if t.startswith(PATH_TAG_PREFIX)), "?")

    @property
    def max_view_chars(self) -> int:
        return self._max_view_chars

    def tool_schema(self) -> dict[str, Any]:
        """The tool definition to send in `tools=[...]`."""
        return {"type": TOOL_TYPE, "name": TOOL_NAME}

    def beta_header(self) -> str | None:
        """The `anthropic-beta` value to send, if any (the memory tool itself needs none)."""
        return MANAGED_AGENTS_BETA if self._managed_agents_beta else None

    def handle(self, tool_use: object) -> dict[str, Any]:
        """Run one `tool_use` block and return its `tool_result` block. Never raises (an exception that
        is no `Exception`, such as KeyboardInterrupt, is not caught)."""
        tool_use_id = ""
        try:
            tool_use_id, tool_input, error = read_block(tool_use, self._echo)  # never raises
            result = error if error is not None else self.execute(tool_input)
            return self.result_block(tool_use_id, result)
        except Exception:  # an `execute` of a subclass may raise
            log.exception("memory tool block failed")
            return {"type": "tool_result", "tool_use_id": tool_use_id, "content": INTERNAL_ERROR, "is_error": True}

    @staticmethod
    def result_block(tool_use_id: str, result: CommandResult) -> dict[str, Any]:
        """The `tool_result` block for a result: `is_error` only on errors."""
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": result.text}
        if result.is_error:
            block["is_error"] = True
        return block

    def execute(self, tool_input: object) -> CommandResult:
        """Run one command given as the tool_use `input` object. Never raises."""

        def run() -> CommandResult:
            checked = validate_input(tool_input, self._echo)
            if isinstance(checked, CommandResult):
                return checked
            command, fields = checked
            return self._dispatch(command, fields)

        return self._guarded(run)

    def clear_all(self) -> CommandResult:
        """Forget every file under the root in the server's scope, in one atomic commit (their content is
        erased, not hidden). Needs `forget` and `read` in the scope. Never raises."""
        return self._guarded(self._clear_all)

    def history(self, path: str) -> list[MemoryRecord]:
        """Every version of the file at `path`, oldest first (versions from before a rename included;
        a move across mounts starts a new record)."""
        if self._mounted is not None:
            return self._mounted.history(path)
        info = self._file(self.canonical_path(path))
        if info is None:
            raise NotFound(f"The path {path} does not exist")
        return self._client.history(info.id)

    def canonical_path(self, path: str) -> str:
        """The canonical form of `path`; `InvalidInput` (with the tool's error text) if it is refused."""
        try:
            return canonicalize(path, self._root, self._max_path_length, self._echo)
        except PathError as exc:
            raise InvalidInput(exc.text) from None

    # -- results ------------------------------------------------------------------------------------

    def _guarded(self, run: Callable[[], CommandResult]) -> CommandResult:
        """`run()`'s result, every store error as its error result, and the text within `max_view_chars`."""
        try:
            result = self._mapped(run)
        except Exception:  # an error whose own text could not be made
            log.exception("memory tool error text failed")
            result = CommandResult(INTERNAL_ERROR, True)
        if len(result.text) > self._max_view_chars:
            return CommandResult(cut_to(result.text, self._max_view_chars), result.is_error)
        return result

    @staticmethod
    def _mapped(run: Callable[[], CommandResult]) -> CommandResult:
        try:
            return run()
        except _Refusal as refusal_:
            return CommandResult(refusal_.text, True)
        except NotFound as exc:
            return CommandResult(f"Error: {exc}", True)
        except PermissionDenied as exc:
            return CommandResult(f"Error: Permission denied: {exc}", True)
        except LockTimeout:
            return CommandResult("Error: The memory store is busy (writer lock timeout); try again", True)
        except ReadOnly:
            return CommandResult("Error: The memory store is read-only", True)
        except MnemoError as exc:
            return CommandResult(f"Error: {exc}", True)
        except Exception as exc:
            log.exception("memory tool command failed")
            return CommandResult(f"{INTERNAL_ERROR} ({_TYPE_NAME.__get__(type(exc))})", True)

    # -- store access -------------------------------------------------------------------------------

    def _file(self, canonical: str) -> RecordInfo | None:
        """The live file record at `canonical` that this agent may read, if any."""
        if canonical == self._root:
            return None
        # The path tag alone narrows to a handful of records; the memory-tool tag is checked on those.
        found = [
            info
            for info in self._client.list_records(tags=(path_tag(canonical),), scope=self._scope)
            if MEMORY_TAG in info.tags
        ]
        if not found:
            return None
        return max(found, key=lambda info: info.seq)

    def _files_beneath(self, directory: str) -> Iterator[tuple[RecordInfo, str]]:
        """The readable file records strictly beneath `directory`, with their paths (no content read)."""
        prefix = path_tag(directory) + "/"
        for info in self._client.list_records(tag_prefix=prefix, scope=self._scope):
            if MEMORY_TAG not in info.tags:
                continue
            for tag in info.tags:
                if tag.startswith(prefix):
                    yield info, tag[len(PATH_TAG_PREFIX) :]
                    break

    def _is_dir(self, canonical: str) -> bool:
        """Whether a readable file lies beneath `canonical` (the root always counts)."""
        return canonical == self._root or next(self._files_beneath(canonical), None) is not None

    def _taken(self, canonical: str) -> bool:
        """Whether a file or a directory is at `canonical`, counting files this agent cannot read."""
        client, scope = self._client, self._scope
        return (
            canonical == self._root
            or client.scope_has(scope, (path_tag(canonical), MEMORY_TAG))
            or client.scope_has(scope, (MEMORY_TAG,), tag_prefix=path_tag(canonical) + "/")
        )

    def _file_under(self, canonical: str) -> str | None:
        """The ancestor of `canonical` that is a file, counting files this agent cannot read."""
        for ancestor in ancestors(canonical, self._root):
            if self._client.scope_has(self._scope, (path_tag(ancestor), MEMORY_TAG)):
                return ancestor
        return None

    def _usage(self, head: tuple[int, str]) -> Usage:
        """The scope's usage as of `head`: remembered from this server's last write if nothing was
        written since, else read from the index (one pass over the memory-tool records)."""
        cached = self._usage_at
        if cached is not None and cached[0] == head:
            return cached[1]
        found = self._client.scope_usage(self._scope, MEMORY_TAG)
        usage = Usage(found.records, found.latest_bytes, found.version_bytes)
        self._usage_at = (head, usage)
        return usage

    def _check_quotas(
        self,
        action: str,
        *,
        history_delta: int,  # every write keeps a version: no default, so no caller leaves it out
        new_files: int = 0,
        live_delta: int = 0,
        versioned: Sequence[tuple[str, int]] = (),
    ) -> None:
        """Refuse the write if a quota forbids it; else note its change of usage for `_writing`."""
        head = self._client._chain_head()  # inside the command's transaction: the log as it stands, locked
        usage = functools.partial(self._usage, head)
        text = refusal(self._quotas, usage, action, new_files, live_delta, history_delta, versioned)
        if text is not None:
            raise _Refusal(text)
        self._planned = (head, Usage(new_files, live_delta, history_delta))

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """A command's transaction. After it commits, the usage remembered for the head before it (if
        any) is carried over, with the change the command made, to the head it left."""
        with self._client.transaction():
            self._planned = None
            yield
            planned, self._planned = self._planned, None
            after = self._client._chain_head() if planned is not None else None  # the head this commit leaves
        cached = self._usage_at
        if planned is None or after is None or cached is None or cached[0] != planned[0]:
            return
        now, change = cached[1], planned[1]
        self._usage_at = (
            after,
            Usage(
                now.files + change.files,
                now.live_bytes + change.live_bytes,
                now.history_bytes + change.history_bytes,
            ),
        )

    def _read(self, info: RecordInfo) -> tuple[str, int]:
        record = self._client.get(info.id)
        return _as_text(record.content), record.version

    # -- command plumbing ---------------------------------------------------------------------------

    def _canonical(self, path: str) -> str:
        try:
            return canonicalize(path, self._root, self._max_path_length, self._echo)
        except PathError as exc:
            raise _Refusal(f"Error: {exc.text}") from None

    def _permit(self, perm: str) -> None:
        try:
            self._client.check_permission(perm, self._scope)
        except PermissionDenied:
            agent = self._client.agent_id
            raise _Refusal(f"Error: Permission denied: {agent} may not {perm} in scope {self._scope}") from None

    def _reading(self) -> AbstractContextManager[object]:
        if self._client.readonly:
            return nullcontext()
        return self._client.transaction()

    def _check_size(self, sent_path: str, size: int) -> None:
        if size > self._max_file_bytes:
            raise _Refusal(
                f"Error: File {sent_path} would be {size} bytes, over the limit of {self._max_file_bytes} bytes"
            )

    def _dispatch(self, command: str, fields: dict[str, Any]) -> CommandResult:
        if self._mounted is not None:
            return self._mounted.run(command, fields)
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

    def _not_a_file(self, path: str, canonical: str, missing: str) -> _Refusal:
        """The refusal of an edit of something that is no readable file: a directory, or nothing."""
        if self._is_dir(canonical):
            return _Refusal(f"Error: The path {path} is not a file.")
        return _Refusal(missing)

    # -- the six commands ---------------------------------------------------------------------------

    def _view(self, path: str, view_range: list[int] | None) -> CommandResult:
        canonical = self._canonical(path)
        with self._reading():
            self._permit("read")
            info = self._file(canonical)
            if info is not None:
                content, _ = self._read(info)
                return format_file_view(path, content, view_range, self._max_view_chars)
            files = [(p, info.size) for info, p in self._files_beneath(canonical)]
            if not files and canonical != self._root:
                raise _Refusal(f"The path {path} does not exist. Please provide a valid path.")
            return CommandResult(format_directory_view(path, canonical, files, self._max_view_chars))

    def _create(self, path: str, file_text: str) -> CommandResult:
        canonical = self._canonical(path)
        size = _utf8_size(file_text)
        with self._writing():
            self._permit("write")
            existing = self._file(canonical)
            if existing is not None:
                if not self._create_overwrites:
                    raise _Refusal(f"Error: File {path} already exists")
                self._check_size(path, size)
                self._check_quotas(
                    f"create {path}",
                    live_delta=size - existing.size,
                    history_delta=size,
                    versioned=[(canonical, existing.version)],
                )
                self._client.update(existing.id, content=file_text, expected_version=existing.version)
                return CommandResult(f"File created successfully at: {path}")
            if self._taken(canonical):
                raise _Refusal(f"Error: File {path} already exists")
            blocker = self._file_under(canonical)
            if blocker is not None:
                raise _Refusal(f"Error: Cannot create {path}: {blocker} is a file")
            self._check_size(path, size)
            self._check_quotas(f"create {path}", new_files=1, live_delta=size, history_delta=size)
            self._client.remember(file_text, tags=(MEMORY_TAG, path_tag(canonical)), scope=self._scope)
        return CommandResult(f"File created successfully at: {path}")

    def _str_replace(self, path: str, old_str: str, new_str: str) -> CommandResult:
        canonical = self._canonical(path)
        with self._writing():
            self._permit("write")
            info = self._file(canonical)
            if info is None:
                raise self._not_a_file(
                    path, canonical, f"Error: The path {path} does not exist. Please provide a valid path."
                )
            if old_str == "":
                raise _Refusal("Error: `old_str` must not be empty")
            content, version = self._read(info)
            pos = content.find(old_str)
            quoted = echo(old_str, self._echo)
            if pos == -1:
                raise _Refusal(f"No replacement was performed, old_str `{quoted}` did not appear verbatim in {path}.")
            if content.find(old_str, pos + len(old_str)) != -1:
                lines = occurrence_list(content, old_str)
                raise _Refusal(
                    f"No replacement was performed. Multiple occurrences of old_str `{quoted}` in lines: "
                    f"{lines}. Please ensure it is unique"
                )
            new_content = content[:pos] + new_str + content[pos + len(old_str) :]
            size = _utf8_size(new_content)
            self._check_size(path, size)
            self._check_quotas(
                f"edit {path}", live_delta=size - info.size, history_delta=size, versioned=[(canonical, version)]
            )
            self._client.update(info.id, content=new_content, expected_version=version)
        snippet = replace_snippet(new_content, content.count("\n", 0, pos), EDITED, self._max_view_chars)
        return CommandResult(snippet)

    def _insert(self, path: str, insert_line: int, text: str) -> CommandResult:
        canonical = self._canonical(path)
        with self._writing():
            self._permit("write")
            info = self._file(canonical)
            if info is None:
                raise self._not_a_file(path, canonical, f"Error: The path {path} does not exist")
            content, version = self._read(info)
            new_content = insert_text(content, insert_line, text)
            if isinstance(new_content, int):
                raise _Refusal(
                    f"Error: Invalid `insert_line` parameter: {insert_line}. It should be within the range "
                    f"of lines of the file: [0, {new_content}]"
                )
            size = _utf8_size(new_content)
            self._check_size(path, size)
            self._check_quotas(
                f"edit {path}", live_delta=size - info.size, history_delta=size, versioned=[(canonical, version)]
            )
            self._client.update(info.id, content=new_content, expected_version=version)
        return CommandResult(f"The file {path} has been edited.")

    def _delete(self, path: str) -> CommandResult:
        canonical = self._canonical(path)
        # A directory's delete builds an object or two per file and no cycles: without the pause, the
        # cyclic collector rescans everything the index holds over and over, more the larger it is.
        with gc_paused(), self._writing():
            self._permit("forget")
            if canonical == self._root:
                raise _Refusal(f"Error: Cannot delete the {self._root} directory itself")
            info = self._file(canonical)
            ids = [info.id] if info is not None else [i.id for i, _ in self._files_beneath(canonical)]
            if not ids:
                raise _Refusal(f"Error: The path {path} does not exist")
            self._client.forget(ids, reason="memory tool: delete")
        return CommandResult(f"Successfully deleted {path}")

    def _rename(self, old_path: str, new_path: str) -> CommandResult:
        old = self._canonical(old_path)
        new = self._canonical(new_path)
        with self._writing():
            self._permit("write")
            if old == self._root:
                raise _Refusal(f"Error: Cannot rename the {self._root} directory itself")
            if self._taken(new):
                raise _Refusal(f"Error: The destination {new_path} already exists")
            source = self._file(old)
            moves: list[tuple[RecordInfo, str, str]]  # (record, its path, its new path)
            if source is not None:
                moves = [(source, old, new)]
            else:
                moves = [(info, p, new + p[len(old) :]) for info, p in self._files_beneath(old)]
                if not moves:
                    raise _Refusal(f"Error: The path {old_path} does not exist")
            if is_within(new, old):
                raise _Refusal(f"Error: Cannot move {old_path} into itself")
            blocker = self._file_under(new)
            if blocker is not None:
                raise _Refusal(f"Error: Cannot create {new_path}: {blocker} is a file")
            # A move is a new version of each file, its content written again.
            self._check_quotas(
                f"rename {old_path}",
                history_delta=sum(info.size for info, _, _ in moves),
                versioned=[(p, info.version) for info, p, _ in moves],
            )
            for info, _, target in moves:
                self._client.update(info.id, tags=retagged(info.tags, target), expected_version=info.version)
        return CommandResult(f"Successfully renamed {old_path} to {new_path}")

    def _clear_all(self) -> CommandResult:
        with self._writing():
            self._permit("forget")
            self._permit("read")  # the store forgets only what its caller may read
            ids = [info.id for info, _ in self._files_beneath(self._root)]
            if ids:
                self._client.forget(ids, reason="memory tool: clear all memory")
        return CommandResult(CLEARED)
