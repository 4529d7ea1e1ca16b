"""`MnemoMemoryToolServer`: Anthropic's client-side memory tool (`memory_20250818`) served from Mnemo.

The contract is docs/MEMORY_TOOL.md, string for string. The server is the tool's front: it checks its
settings against the client's limits, reads `tool_use` blocks and inputs (`mnemo.tools.inputs`), runs
each command with `mnemo.tools.commands` over its layout (one scope at the root, or a mount table:
`mnemo.tools.mounts`), turns every refusal and store error into its error result, and keeps every result
within `max_view_chars`.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from mnemo.acl import check_name
from mnemo.errors import (
    Closed,
    Conflict,
    DurabilityError,
    EmbedderError,
    EmbedderMismatch,
    ErasureIncomplete,
    IntegrityError,
    InvalidInput,
    LockTimeout,
    MnemoError,
    NotFound,
    PermissionDenied,
    ReadOnly,
    StorageError,
    UnreadableDatabase,
)
from mnemo.recall.embedding import MODES
from mnemo.tools.commands import CLEARED as CLEARED  # the clear_all text, where it always was
from mnemo.tools.commands import Commands, Refusal, Settings
from mnemo.tools.inputs import DEFAULT_SEARCH_LIMIT, MAX_SEARCH_LIMIT, read_block, validate_input, validate_search
from mnemo.tools.layout import Layout, SingleScope
from mnemo.tools.mounts import MountTable, check_mounts
from mnemo.tools.paths import DEFAULT_MAX_PATH_LENGTH, DEFAULT_ROOT, MEMORY_TAG, PATH_TAG_PREFIX, check_root
from mnemo.tools.quotas import Quotas, Usage
from mnemo.tools.text import (
    CommandResult,
    cut_to,
    format_directory_view,
    format_file_view,
    format_size,
    insert_text,
    occurrence_lines,
    replace_snippet,
)

if TYPE_CHECKING:
    from mnemo.client import MnemoClient
    from mnemo.record import MemoryRecord, Recalled, RecordInfo

__all__ = [
    "DEFAULT_SEARCH_LIMIT",
    "MAX_SEARCH_LIMIT",
    "MEMORY_TAG",
    "SEARCH_INPUT_SCHEMA",
    "SEARCH_TOOL_NAME",
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
SEARCH_TOOL_NAME = "memory_search"
SEARCH_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": (
                'What to look for: words (any of them; more, and rarer, matches rank higher), "a phrase" in '
                "quotes, word* for every word starting with word, -word to leave out files holding it. Case "
                "and accents do not matter."
            ),
        },
        "path": {
            "type": "string",
            "description": "The directory under /memories to search, such as /memories/project (default: /memories, "
            "all of memory); the path of a file searches that file alone.",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_SEARCH_LIMIT,
            "description": f"The most files to return, best first (default {DEFAULT_SEARCH_LIMIT}).",
        },
        "mode": {
            "type": "string",
            "enum": list(MODES),
            "description": (
                "How files are matched: hybrid (by words and by meaning: finds a file that says the same thing "
                "in other words; the default when the memory has an embedder), semantic (by meaning alone) or "
                "lexical (by words alone; the default otherwise)."
            ),
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}
"""The input schema of the search (docs/MEMORY_TOOL.md §11), as the MCP server and the SDK's tool send it."""
MANAGED_AGENTS_BETA = "managed-agents-2026-04-01"
DEFAULT_MAX_FILE_BYTES = 1 << 20
DEFAULT_MAX_VIEW_CHARS = 16_000
# Room a result needs beside the two values it may echo (docs/MEMORY_TOOL.md §3).
RESULT_OVERHEAD_CHARS = 1024
INTERNAL_ERROR = "Error: Internal error"
# The errors of Mnemo that speak of the command asked (its path, its value, the agent's permission): the
# model gets them in their words (docs/MEMORY_TOOL.md §3).
_IN_ITS_WORDS = (NotFound, Conflict, InvalidInput, Closed)
# A failure of the store itself is written for its operator: it may name the database's path or server,
# or the file of an OS error. It is logged, and the model is told what it can do, by its kind.
STORE_FAILURES: tuple[tuple[type[MnemoError], str], ...] = (
    (ErasureIncomplete, "Error: The change was committed and the content it removes erased from the memory store, "
     "but a read still in progress on the server can see the erased bytes until it ends (the server's log "
     "says which); do not repeat the command"),
    (DurabilityError, "Error: The memory store failed to write to its storage (the server's log says why), and "
     "takes no more commands until its operator reopens it; whether the last change was saved is not known"),
    (IntegrityError, "Error: Data of the memory store that this command reads is damaged or was tampered with "
     "(the server's log says where; its operator can run `mnemo verify`); other files may still be read"),
    (UnreadableDatabase, "Error: The memory store cannot be read (the server's log says why); try again later"),
    (StorageError, "Error: The memory store's database failed or refused this command, and nothing was written "
     "(the server's log says why); try again later"),
    (EmbedderError, "Error: The memory store's embedder failed, and nothing was written (the server's log says "
     'why); try again later, or search with mode "lexical"'),
    (EmbedderMismatch, "Error: The memory store's vectors were made by another embedder than the server's (the "
     'server\'s log says which); search with mode "lexical"'),
)
"""What the model is told of each failure of the store itself (docs/MEMORY_TOOL.md §3); any other is
`Error: The memory store failed ({error class}); the server's log says why`."""
_TYPE_NAME = type.__dict__["__name__"]  # a class's own name, whatever its metaclass claims


def _store_places(path: object) -> tuple[tuple[re.Pattern[str], str], ...]:
    """What `hide_store` replaces: the database's path (a file's as given, absolute and resolved; a
    PostgreSQL database's name) with whatever follows it up to a space or a quote, then its folder, the
    longest first."""
    if not isinstance(path, str) or not path:
        return ()
    places = {path: "the memory store"}
    if "://" not in path:
        for form in (os.path.abspath(path), os.path.realpath(path)):
            places[form] = "the memory store"
            folder = os.path.dirname(form)
            if folder.strip("/"):
                places.setdefault(folder, "the memory store's folder")
    ordered = sorted(places.items(), key=lambda item: -len(item[0]))
    # (a place stands at the start of the text or after a space, a quote or a parenthesis, so that a name
    # within a longer one, such as a memory path ending in the database's relative name, stays)
    return tuple((re.compile(r"(?<![^\s'\"(])" + re.escape(place) + r"[^\s'\"]*"), name) for place, name in ordered)


class MnemoMemoryToolServer:
    """Serves the memory tool's six commands from a `MnemoClient`, in one scope, under one root.

    `handle(tool_use)` takes a `tool_use` block (a dict or an SDK content block) and returns the
    `tool_result` block to send back; it never raises. `execute(input)` runs one command's input and
    returns a `CommandResult`; the SDK adapter in `mnemo.tools.anthropic` is built on it. `search(query,
    path)` searches the files (docs/MEMORY_TOOL.md §11), as the MCP and SDK tools `memory_search` do. Every result
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
        self._store_places = _store_places(getattr(client, "path", None))
        self._scope = client.home_scope if scope is None else check_name(scope, "scope")  # exact, never a pattern
        layout: Layout = SingleScope(self._root, self._scope)
        if mounts is not None:
            given = None if scope is None else self._scope
            layout = MountTable(self._root, check_mounts(mounts, self._root, given, client.home_scope, max_path_length))
            self._scope = layout.scope
        self._layout = layout
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
        settings = Settings(
            max_file_bytes, max_view_chars, max_path_length, self._echo, self._create_overwrites, self._quotas
        )
        self._commands = Commands(client, settings, layout)

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
        return self._layout.mounts

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
        return self._commands.scope_of(self.canonical_path(path))

    def version_path(self, record: MemoryRecord) -> str:
        """The path a version of a file had, as this server lists it."""
        return self._layout.version_path(record)

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
            return self._commands.run(command, fields)

        return self._guarded(run)

    def search(
        self, query: str, path: str | None = None, limit: int = DEFAULT_SEARCH_LIMIT, mode: str | None = None
    ) -> CommandResult:
        """Search the files under `path` (default: the root, `/memories`) for `query` (docs/RECALL.md:
        words, "phrases", -excluded, prefix*) and return the best `limit` (1 to 100) as the memory tool
        would: their paths, best first, each with its matching lines numbered as `view` numbers them
        (docs/MEMORY_TOOL.md §11). `mode`: "hybrid", "semantic" or "lexical" (docs/RECALL.md §6; None:
        the client's default, hybrid with an embedder). With mounts, every mount the agent may read is
        searched. The result is within `max_view_chars`; a bad query, path, limit or mode is an error
        result. Never raises."""
        return self.execute_search({"query": query, "path": path, "limit": limit, "mode": mode})

    def execute_search(self, search_input: object) -> CommandResult:
        """Run a search given as a tool's input object, `{"query": ..., "path": ..., "limit": ...,
        "mode": ...}` (`path`, `limit` and `mode` optional), checked as a command's input is (§2): what the
        MCP tool `memory_search` and the SDK's `MnemoSearchTool` run. Never raises."""

        def run() -> CommandResult:
            fields = validate_search(search_input)
            if isinstance(fields, CommandResult):
                return fields
            return self._commands.search(fields["query"], fields.get("path"), fields.get("limit", DEFAULT_SEARCH_LIMIT),
                                         fields.get("mode"))

        return self._guarded(run)

    def clear_all(self) -> CommandResult:
        """Forget every file under the root in the server's scope, in one atomic commit (their content is
        erased, not hidden). Needs `forget` and `read` in the scope. Never raises."""
        return self._guarded(self._commands.clear_all)

    def history(self, path: str) -> list[MemoryRecord]:
        """Every version of the file at `path`, oldest first (versions from before a rename included;
        a move across mounts starts a new record)."""
        return self._commands.history(path)

    def canonical_path(self, path: str) -> str:
        """The canonical form of `path`; `InvalidInput` (with the tool's error text) if it is refused."""
        return self._commands.canonical_path(path)

    def files(self, path: str | None = None) -> list[tuple[str, RecordInfo]]:
        """The file at `path` (default: the root), or every file beneath the directory there, that the
        agent sees now (every mount it may read), each with its path as listed, sorted by path; what the
        index knows of each (size, latest version, its agent, seq and time), no content read. One listing
        of each mount's scope, whatever the number of files. `InvalidInput` for a refused path,
        `PermissionDenied` when the agent may not read the scope serving it, `NotFound` when nothing is
        there."""
        return self._commands.files(self._root if path is None else path)

    def visible_mounts(self) -> dict[str, str]:
        """The mounts the agent sees now, point -> scope, sorted by point: each mount whose scope it may
        read, and the root's (`mounts` is the whole table, whoever looks)."""
        return self._commands.mounts_seen()

    def search_files(
        self, query: str, path: str | None = None, limit: int = DEFAULT_SEARCH_LIMIT, mode: str | None = None
    ) -> tuple[list[tuple[str, Recalled]], bool]:
        """What `search` finds, as values: the best `limit` files under `path` for `query`, best first,
        each with its path as listed and recall's hit (the record, the score, the matching lines), and
        whether more files matched. Every input is checked as `search` checks it; a refusal is
        `InvalidInput` with the tool's text (without its `Error: `)."""
        fields = validate_search({"query": query, "path": path, "limit": limit, "mode": mode})
        if isinstance(fields, CommandResult):
            raise InvalidInput(fields.text.removeprefix("Error: "))
        try:
            return self._commands.matches(fields["query"], fields.get("path"),
                                          fields.get("limit", DEFAULT_SEARCH_LIMIT), fields.get("mode"))
        except Refusal as refusal_:
            raise InvalidInput(refusal_.text.removeprefix("Error: ")) from None

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

    def _mapped(self, run: Callable[[], CommandResult]) -> CommandResult:
        try:
            return run()
        except Refusal as refusal_:
            return CommandResult(refusal_.text, True)
        except MnemoError as exc:
            return self.error_result(exc)
        except Exception as exc:
            log.exception("memory tool command failed")
            return CommandResult(f"{INTERNAL_ERROR} ({_TYPE_NAME.__get__(type(exc))})", True)

    def error_result(self, error: MnemoError) -> CommandResult:
        """The error result of an error of Mnemo met running a command (docs/MEMORY_TOOL.md §3). One that
        speaks of the command (a missing record, a refused value, a permission) is given in its words;
        a failure of the store itself (`STORE_FAILURES`: a damaged or unreadable database, a failed
        write, a database server that is down or refuses) is logged in its words, which are the
        operator's (a path, a server's name), and given as what the model can do. No text given names
        where the database is: its path, or its server's name, is left out of every one. An error whose
        text cannot be made is `Error: Internal error`. Never raises."""
        try:
            text = str(error)
        except Exception:
            log.exception("memory tool error text failed")
            return CommandResult(INTERNAL_ERROR, True)
        if isinstance(error, LockTimeout):
            return CommandResult("Error: The memory store is busy (writer lock timeout); try again", True)
        if isinstance(error, ReadOnly):
            return CommandResult("Error: The memory store is read-only", True)
        if isinstance(error, PermissionDenied):
            return CommandResult(f"Error: Permission denied: {self.hide_store(text)}", True)
        if isinstance(error, _IN_ITS_WORDS):
            return CommandResult(f"Error: {self.hide_store(text)}", True)
        kind = _TYPE_NAME.__get__(type(error))
        log.warning("memory tool command failed: %s: %s", kind, text)
        for failure, told in STORE_FAILURES:
            if isinstance(error, failure):
                return CommandResult(told, True)
        return CommandResult(f"Error: The memory store failed ({kind}); the server's log says why", True)

    def hide_store(self, text: str) -> str:
        """`text` with every mention of where the database is (its path as given, absolute or resolved,
        with what follows it up to a space or quote, such as a sidecar's suffix; its folder; a
        PostgreSQL database's name) replaced by `the memory store` (or `the memory store's folder`)."""
        for place, name in self._store_places:
            text = place.sub(name, text)
        return text

    # -- what the tests of the usage cache look at ---------------------------------------------------

    @property
    def _mounted(self) -> Commands | None:
        """The commands, when the server has mounts (their usage cache holds one entry per scope)."""
        return self._commands if isinstance(self._layout, MountTable) else None

    @property
    def _usage_at(self) -> tuple[tuple[int, str], Usage] | None:
        """The usage remembered for the server's scope and the log head it holds for, if any."""
        return self._commands._usage_at.get(self._scope)
