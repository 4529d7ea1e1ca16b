"""`MnemoMemoryToolServer`: Anthropic's client-side memory tool (`memory_20250818`) served from Mnemo.

The contract is spec/memory-tool.md, string for string. Every file is one live record tagged
`memorytool` and `path:{canonical path}` in the server's scope; directories are implicit. Every
command runs inside one `client.transaction()` (a view on a read-only client reads without one), so
its reads and writes happen under the writer lock and its writes commit as one frame: a rename or delete
of a whole directory is all or nothing, and two processes editing one file never lose an update.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from mnemo.acl import check_name
from mnemo.errors import InvalidInput, LockTimeout, MnemoError, NotFound, PermissionDenied, ReadOnly
from mnemo.tools.paths import (
    DEFAULT_MAX_PATH_LENGTH,
    DEFAULT_ROOT,
    PATH_TAG_PREFIX,
    PathError,
    ancestors,
    canonicalize,
    check_root,
    is_within,
    path_tag,
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
MEMORY_TAG = "memorytool"
MANAGED_AGENTS_BETA = "managed-agents-2026-04-01"
MAX_LINES = 999_999
DEFAULT_MAX_FILE_BYTES = 1 << 20
DEFAULT_MAX_VIEW_CHARS = 16_000

_Kind = Literal["str", "int", "range"]
_TYPE_NAMES: dict[_Kind, str] = {"str": "a string", "int": "an integer", "range": "a list of two integers"}

# command -> fields in the spec's table order: (name, kind, required)
_FIELDS: dict[str, tuple[tuple[str, _Kind, bool], ...]] = {
    "view": (("path", "str", True), ("view_range", "range", False)),
    "create": (("path", "str", True), ("file_text", "str", True)),
    "str_replace": (("path", "str", True), ("old_str", "str", True), ("new_str", "str", False)),
    "insert": (("path", "str", True), ("insert_line", "int", True), ("insert_text", "str", True)),
    "delete": (("path", "str", True),),
    "rename": (("old_path", "str", True), ("new_path", "str", True)),
}
_PATH_FIELDS = frozenset({"path", "old_path", "new_path"})


@dataclass(frozen=True)
class CommandResult:
    """The outcome of one memory-tool command: the result text, and whether it is an error result."""

    text: str
    is_error: bool = False


class _Refusal(Exception):
    """A command ends with an error result; raised inside the transaction so nothing is written."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


# ---------------------------------------------------------------------------------------------------
# Pure helpers: input checks and the exact text formats of the contract.
# ---------------------------------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def validate_input(tool_input: object) -> tuple[str, dict[str, Any]] | CommandResult:
    """Check a tool_use input as the spec's §2 orders. Returns `(command, fields)` or an error result.

    `fields` holds every field of the command that was given (fields sent as `null` are absent), with
    `view_range` as a list.
    """
    if not isinstance(tool_input, Mapping):
        return CommandResult("Error: Invalid input: expected an object", True)
    command = tool_input.get("command")
    if not isinstance(command, str):
        return CommandResult("Error: Missing required parameter `command`", True)
    spec = _FIELDS.get(command)
    if spec is None:
        return CommandResult(f"Error: Unknown command: {command}", True)
    fields: dict[str, Any] = {}
    for name, kind, required in spec:
        value = tool_input.get(name)
        if value is None:
            if required:
                return CommandResult(f"Error: Missing required parameter `{name}` for command `{command}`", True)
            continue
        type_error = CommandResult(
            f"Error: Parameter `{name}` of command `{command}` must be {_TYPE_NAMES[kind]}", True
        )
        if kind == "str":
            if not isinstance(value, str):
                return type_error
            if name not in _PATH_FIELDS and _has_surrogate(value):
                return CommandResult(
                    f"Error: Parameter `{name}` of command `{command}` must be valid Unicode text"
                    " (it holds an unpaired surrogate)",
                    True,
                )
        elif kind == "int":
            if not _is_int(value):
                return type_error
        else:
            if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(_is_int(v) for v in value):
                return type_error
            value = [int(value[0]), int(value[1])]
        fields[name] = value
    return command, fields


def format_size(n: int) -> str:
    """Human-readable size exactly as the memory tool prints it (`0B`, `1023B`, `1K`, `1.5K`, `1.2M`)."""
    if n == 0:
        return "0B"
    i = min((n.bit_length() - 1) // 10, 3)
    unit = "BKMG"[i]
    s = n / 1024**i
    if s == int(s):
        return f"{int(s)}{unit}"
    return f"{s:.1f}{unit}"


def _numbered(lines: Sequence[str], first: int) -> str:
    return "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(lines, first))


def _hidden(name: str) -> bool:
    return name.startswith(".") or name == "node_modules"


def format_directory_view(sent_path: str, directory: str, files: Sequence[tuple[str, int]]) -> str:
    """The `view` text of a directory.

    `directory` is the canonical directory; `files` holds `(canonical path, size in bytes)` of every
    file beneath it at any depth (hidden ones included: they count toward directory sizes).
    """
    # (name, is_dir) -> size, for the children, and per child directory for the grandchildren
    level1: dict[tuple[str, bool], int] = {}
    level2: dict[str, dict[tuple[str, bool], int]] = {}
    total = 0
    cut = len(directory) + 1
    for path, size in files:
        total += size
        parts = path[cut:].split("/")
        key1 = (parts[0], len(parts) > 1)
        level1[key1] = level1.get(key1, 0) + size
        if len(parts) > 1:
            below = level2.setdefault(parts[0], {})
            key2 = (parts[1], len(parts) > 2)
            below[key2] = below.get(key2, 0) + size
    out = [
        "Here're the files and directories up to 2 levels deep in "
        f"{sent_path}, excluding hidden items and node_modules:",
        f"{format_size(total)}\t{directory}",
    ]
    for name, is_dir in sorted(level1):
        if _hidden(name):
            continue
        size = level1[(name, is_dir)]
        if not is_dir:
            out.append(f"{format_size(size)}\t{directory}/{name}")
            continue
        out.append(f"{format_size(size)}\t{directory}/{name}/")
        below = level2.get(name, {})
        for sub, sub_is_dir in sorted(below):
            if _hidden(sub):
                continue
            suffix = "/" if sub_is_dir else ""
            out.append(f"{format_size(below[(sub, sub_is_dir)])}\t{directory}/{name}/{sub}{suffix}")
    return "\n".join(out)


def format_file_view(
    sent_path: str, content: str, view_range: Sequence[int] | None, max_view_chars: int
) -> CommandResult:
    """The `view` result of a file (spec §5), including the `view_range` and long-file rules."""
    if view_range is not None and view_range[1] < -1:
        return CommandResult(f"Error: Invalid `view_range`: {list(view_range)}", True)
    lines = content.split("\n")
    n = len(lines)
    if n > MAX_LINES:
        return CommandResult(f"File {sent_path} exceeds maximum line limit of 999,999 lines.", True)
    header = f"Here's the content of {sent_path} with line numbers:\n"
    if view_range is not None:
        start = max(1, view_range[0])
        end = n if view_range[1] == -1 else min(view_range[1], n)
        shown = lines[start - 1 : end] if start <= end else []
        return CommandResult(header + _numbered(shown, start))
    if len(content) <= max_view_chars:
        return CommandResult(header + _numbered(lines, 1))
    k = 1
    length = len(lines[0])
    while k < n and length + 1 + len(lines[k]) <= max_view_chars:
        length += 1 + len(lines[k])
        k += 1
    note = f"... (showing lines 1-{k} of {n}; use view_range to see the rest)"
    return CommandResult(header + _numbered(lines[:k], 1) + "\n" + note)


def occurrence_lines(content: str, old_str: str) -> list[int]:
    """1-based line of every start position of `old_str` in `content`, overlapping starts included."""
    out: list[int] = []
    line = 1
    counted_to = 0
    start = 0
    while True:
        pos = content.find(old_str, start)
        if pos == -1:
            return out
        line += content.count("\n", counted_to, pos)
        counted_to = pos
        out.append(line)
        start = pos + 1


def replace_snippet(new_content: str, changed_line_index: int) -> str:
    """Lines around an edit, numbered: from two lines before the change to three after its first line."""
    new_lines = new_content.split("\n")
    first = max(0, changed_line_index - 2) + 1
    last = min(len(new_lines), changed_line_index + 3)
    return _numbered(new_lines[first - 1 : last], first)


def insert_text(content: str, insert_line: int, text: str) -> str | int:
    """Content after inserting `text` after line `insert_line`; or the line count when out of range."""
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    if insert_line < 0 or insert_line > len(lines):
        return len(lines)
    lines.insert(insert_line, text.rstrip("\n"))
    new_content = "\n".join(lines)
    if not new_content.endswith("\n"):
        new_content += "\n"
    return new_content


def _as_text(content: str | bytes) -> str:
    if isinstance(content, bytes):
        return content.decode("utf-8", errors="replace")
    return content


# ---------------------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------------------


class MnemoMemoryToolServer:
    """Serves the memory tool's six commands from a `MnemoClient`, in one scope, under one root.

    `handle(tool_use)` takes a `tool_use` block (a dict or an SDK content block) and returns the
    `tool_result` block to send back; it never raises. `execute(input)` runs one command's input and
    returns a `CommandResult`; the SDK adapter in `mnemo.tools.anthropic` is built on it.
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
    ) -> None:
        for name, value in (
            ("max_file_bytes", max_file_bytes),
            ("max_view_chars", max_view_chars),
            ("max_path_length", max_path_length),
        ):
            if not _is_int(value) or value < 1:
                raise InvalidInput(f"{name} must be a positive integer, got {value!r}")
        try:
            self._root = check_root(root)
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
        self._client = client
        self._scope = client.home_scope if scope is None else check_name(scope, "scope")  # exact, never a pattern
        self._managed_agents_beta = bool(managed_agents_beta)
        self._create_overwrites = bool(create_overwrites)
        self._max_file_bytes = max_file_bytes
        self._max_view_chars = max_view_chars
        self._max_path_length = max_path_length

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

    def tool_schema(self) -> dict[str, Any]:
        """The tool definition to send in `tools=[...]`."""
        return {"type": TOOL_TYPE, "name": TOOL_NAME}

    def beta_header(self) -> str | None:
        """The `anthropic-beta` value to send, if any (the memory tool itself needs none)."""
        return MANAGED_AGENTS_BETA if self._managed_agents_beta else None

    def handle(self, tool_use: object) -> dict[str, Any]:
        """Run one `tool_use` block and return its `tool_result` block. Never raises."""
        if isinstance(tool_use, Mapping):
            raw_id: object = tool_use.get("id")
            name: object = tool_use.get("name")
            tool_input: object = tool_use.get("input")
        else:
            raw_id = getattr(tool_use, "id", None)
            name = getattr(tool_use, "name", None)
            tool_input = getattr(tool_use, "input", None)
        tool_use_id = raw_id if isinstance(raw_id, str) else ("" if raw_id is None else str(raw_id))
        if name != TOOL_NAME:
            return self.result_block(tool_use_id, CommandResult(f"Error: Unknown tool: {name}", True))
        return self.result_block(tool_use_id, self.execute(tool_input))

    @staticmethod
    def result_block(tool_use_id: str, result: CommandResult) -> dict[str, Any]:
        """The `tool_result` block for a result: `is_error` only on errors."""
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": result.text}
        if result.is_error:
            block["is_error"] = True
        return block

    def execute(self, tool_input: object) -> CommandResult:
        """Run one command given as the tool_use `input` object. Never raises."""
        try:
            checked = validate_input(tool_input)
            if isinstance(checked, CommandResult):
                return checked
            command, fields = checked
            return self._dispatch(command, fields)
        except _Refusal as refusal:
            return CommandResult(refusal.text, True)
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
            return CommandResult(f"Error: Internal error ({type(exc).__name__})", True)

    def history(self, path: str) -> list[MemoryRecord]:
        """Every version of the file at `path`, oldest first (versions from before a rename included)."""
        info = self._file(self.canonical_path(path))
        if info is None:
            raise NotFound(f"The path {path} does not exist")
        return self._client.history(info.id)

    def canonical_path(self, path: str) -> str:
        """The canonical form of `path`; `InvalidInput` (with the tool's error text) if it is refused."""
        try:
            return canonicalize(path, self._root, self._max_path_length)
        except PathError as exc:
            raise InvalidInput(exc.text) from None

    # -- store access -------------------------------------------------------------------------------

    def _file(self, canonical: str) -> RecordInfo | None:
        """The live file record at `canonical`, if any."""
        if canonical == self._root:
            return None
        found = self._client.list_records(tags=(MEMORY_TAG, path_tag(canonical)), scope=self._scope)
        if not found:
            return None
        return max(found, key=lambda info: info.seq)

    def _beneath(self, directory: str, limit: int | None = None) -> list[RecordInfo]:
        """The file records strictly beneath `directory` (index only, no content read)."""
        return self._client.list_records(
            tags=(MEMORY_TAG,), tag_prefix=path_tag(directory) + "/", scope=self._scope, limit=limit
        )

    def _is_dir(self, canonical: str) -> bool:
        return canonical == self._root or bool(self._beneath(canonical, limit=1))

    def _exists(self, canonical: str) -> bool:
        return self._file(canonical) is not None or self._is_dir(canonical)

    def _file_under(self, canonical: str) -> str | None:
        """The ancestor of `canonical` that is a file, if one is."""
        for ancestor in ancestors(canonical, self._root):
            if self._file(ancestor) is not None:
                return ancestor
        return None

    @staticmethod
    def _path_of(info: RecordInfo, directory: str) -> str | None:
        prefix = path_tag(directory) + "/"
        for tag in info.tags:
            if tag.startswith(prefix):
                return tag[len(PATH_TAG_PREFIX) :]
        return None

    def _files_beneath(self, directory: str) -> Iterator[tuple[RecordInfo, str]]:
        for info in self._beneath(directory):
            path = self._path_of(info, directory)
            if path is not None:
                yield info, path

    def _read(self, info: RecordInfo) -> tuple[str, int]:
        record = self._client.get(info.id)
        return _as_text(record.content), record.version

    @staticmethod
    def _retag(tags: Sequence[str], new_path: str) -> tuple[str, ...]:
        kept = [tag for tag in tags if not tag.startswith(PATH_TAG_PREFIX)]
        if MEMORY_TAG not in kept:
            kept.append(MEMORY_TAG)
        return tuple(kept) + (path_tag(new_path),)

    # -- command plumbing ---------------------------------------------------------------------------

    def _canonical(self, path: str) -> str:
        try:
            return canonicalize(path, self._root, self._max_path_length)
        except PathError as exc:
            raise _Refusal(f"Error: {exc.text}") from None

    def _permit(self, perm: str) -> None:
        try:
            self._client.check_permission(perm, self._scope)
        except PermissionDenied:
            agent = self._client.agent_id
            raise _Refusal(f"Error: Permission denied: {agent} may not {perm} in scope {self._scope}") from None

    def _transaction(self, writes: bool) -> AbstractContextManager[object]:
        if not writes and getattr(self._client, "readonly", False):
            return nullcontext()
        return self._client.transaction()

    def _check_size(self, sent_path: str, content: str) -> None:
        size = len(content.encode("utf-8"))
        if size > self._max_file_bytes:
            raise _Refusal(
                f"Error: File {sent_path} would be {size} bytes, over the limit of {self._max_file_bytes} bytes"
            )

    def _dispatch(self, command: str, fields: dict[str, Any]) -> CommandResult:
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

    # -- the six commands ---------------------------------------------------------------------------

    def _view(self, path: str, view_range: list[int] | None) -> CommandResult:
        canonical = self._canonical(path)
        with self._transaction(writes=False):
            self._permit("read")
            info = self._file(canonical)
            if info is not None:
                content, _ = self._read(info)
                return format_file_view(path, content, view_range, self._max_view_chars)
            files = [(p, info.size) for info, p in self._files_beneath(canonical)]
            if not files and canonical != self._root:
                raise _Refusal(f"The path {path} does not exist. Please provide a valid path.")
            return CommandResult(format_directory_view(path, canonical, files))

    def _create(self, path: str, file_text: str) -> CommandResult:
        canonical = self._canonical(path)
        with self._transaction(writes=True):
            self._permit("write")
            existing = self._file(canonical)
            if existing is not None:
                if not self._create_overwrites:
                    raise _Refusal(f"Error: File {path} already exists")
                self._check_size(path, file_text)
                self._client.update(existing.id, content=file_text, expected_version=existing.version)
                return CommandResult(f"File created successfully at: {path}")
            if self._is_dir(canonical):
                raise _Refusal(f"Error: File {path} already exists")
            blocker = self._file_under(canonical)
            if blocker is not None:
                raise _Refusal(f"Error: Cannot create {path}: {blocker} is a file")
            self._check_size(path, file_text)
            self._client.remember(file_text, tags=(MEMORY_TAG, path_tag(canonical)), scope=self._scope)
        return CommandResult(f"File created successfully at: {path}")

    def _str_replace(self, path: str, old_str: str, new_str: str) -> CommandResult:
        canonical = self._canonical(path)
        with self._transaction(writes=True):
            self._permit("write")
            info = self._file(canonical)
            if info is None:
                raise _Refusal(f"Error: The path {path} does not exist. Please provide a valid path.")
            if old_str == "":
                raise _Refusal("Error: `old_str` must not be empty")
            content, version = self._read(info)
            pos = content.find(old_str)
            if pos == -1:
                raise _Refusal(f"No replacement was performed, old_str `{old_str}` did not appear verbatim in {path}.")
            if content.find(old_str, pos + len(old_str)) != -1:
                lines = ", ".join(map(str, occurrence_lines(content, old_str)))
                raise _Refusal(
                    f"No replacement was performed. Multiple occurrences of old_str `{old_str}` in lines: "
                    f"{lines}. Please ensure it is unique"
                )
            new_content = content[:pos] + new_str + content[pos + len(old_str) :]
            self._check_size(path, new_content)
            self._client.update(info.id, content=new_content, expected_version=version)
        snippet = replace_snippet(new_content, content.count("\n", 0, pos))
        return CommandResult(
            "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n" + snippet
        )

    def _insert(self, path: str, insert_line: int, text: str) -> CommandResult:
        canonical = self._canonical(path)
        with self._transaction(writes=True):
            self._permit("write")
            info = self._file(canonical)
            if info is None:
                raise _Refusal(f"Error: The path {path} does not exist")
            content, version = self._read(info)
            new_content = insert_text(content, insert_line, text)
            if isinstance(new_content, int):
                raise _Refusal(
                    f"Error: Invalid `insert_line` parameter: {insert_line}. It should be within the range "
                    f"of lines of the file: [0, {new_content}]"
                )
            self._check_size(path, new_content)
            self._client.update(info.id, content=new_content, expected_version=version)
        return CommandResult(f"The file {path} has been edited.")

    def _delete(self, path: str) -> CommandResult:
        canonical = self._canonical(path)
        with self._transaction(writes=True):
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
        with self._transaction(writes=True):
            self._permit("write")
            if old == self._root:
                raise _Refusal(f"Error: Cannot rename the {self._root} directory itself")
            if self._exists(new):
                raise _Refusal(f"Error: The destination {new_path} already exists")
            source = self._file(old)
            moves: list[tuple[RecordInfo, str]]
            if source is not None:
                moves = [(source, new)]
            else:
                moves = [(info, new + p[len(old) :]) for info, p in self._files_beneath(old)]
                if not moves:
                    raise _Refusal(f"Error: The path {old_path} does not exist")
            if is_within(new, old):
                raise _Refusal(f"Error: Cannot move {old_path} into itself")
            blocker = self._file_under(new)
            if blocker is not None:
                raise _Refusal(f"Error: Cannot create {new_path}: {blocker} is a file")
            for info, target in moves:
                self._client.update(info.id, tags=self._retag(info.tags, target), expected_version=info.version)
        return CommandResult(f"Successfully renamed {old_path} to {new_path}")
