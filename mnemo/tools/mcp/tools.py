"""The MCP tools: their names, schemas, descriptions and hints, and what a call of each returns.

The six memory-tool commands are not reimplemented here: a call builds the command's input object from
the arguments it was given and runs `MnemoMemoryToolServer.execute`, so an MCP client gets the text the
memory tool returns, string for string, and bad arguments meet the memory tool's own checks (no
coercion or validation happens before them). `memory_search` runs `MnemoMemoryToolServer.execute_search`
the same way. Two more tools read what only Mnemo has: the versions of a file, and the chain check.
This module needs nothing of the MCP SDK.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mnemo.errors import InvalidInput, MnemoError, NotFound, PermissionDenied
from mnemo.record import MemoryRecord, Problem, ScopeReport, VerifyReport
from mnemo.tools.layout import tagged_path
from mnemo.tools.server import (
    DEFAULT_MAX_VIEW_CHARS,
    SEARCH_INPUT_SCHEMA,
    SEARCH_TOOL_NAME,
    CommandResult,
    MnemoMemoryToolServer,
)
from mnemo.tools.text import echo_sent

__all__ = [
    "INSTRUCTIONS",
    "READ_ONLY_INSTRUCTIONS",
    "TOOLS",
    "ToolSpec",
    "call_tool",
    "format_history",
    "format_scope_verify",
    "format_verify",
    "tools_for",
]

log = logging.getLogger("mnemo.tools.mcp")

MAX_LISTED_PROBLEMS = 20
MAX_HISTORY_CHARS = 100_000

INSTRUCTIONS = (
    "This server is your memory: a directory of text files under /memories that outlives the "
    "conversation. Before doing anything else in a task, call memory_view with path \"/memories\" to "
    "see what you recorded earlier, and read the files that bear on the task. When memory holds many "
    "files, or you look for something in particular, call memory_search with a few words rather than "
    "viewing file after file: it answers with the files that match best and their matching lines. As you "
    "work, record what is worth keeping (progress, decisions, facts about the user and the project) with "
    "memory_create, memory_str_replace and memory_insert: your context may be reset at any moment, and "
    "what is not in memory is lost. Keep the directory tidy: update and rename files rather than piling "
    "up new ones, and delete what is wrong or obsolete. Every path lives under /memories. Every change is "
    "kept as a version (memory_history) in a hash-chained log (memory_verify); memory_delete erases a "
    "file and all its versions for good."
)

READ_ONLY_INSTRUCTIONS = (
    "This server is your memory, read-only: a directory of text files under /memories that outlives "
    "the conversation. Before doing anything else in a task, call memory_view with path \"/memories\" "
    "to see what was recorded earlier, and read the files that bear on the task. When memory holds many "
    "files, or you look for something in particular, call memory_search with a few words rather than "
    "viewing file after file: it answers with the files that match best and their matching lines. Every "
    "path lives under /memories; memory_history shows every version of a file and memory_verify checks "
    "the store's hash-chained log. This server cannot change memory."
)

_PATH = "A path under /memories, such as /memories or /memories/project/notes.md."


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _schema(properties: dict[str, dict[str, Any]], required: tuple[str, ...]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


@dataclass(frozen=True)
class Hints:
    """MCP tool annotations (`readOnlyHint` and the others), in the order the protocol lists them."""

    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool = False


@dataclass(frozen=True)
class ToolSpec:
    """One MCP tool. `command` names the memory-tool command it runs; `None` for Mnemo's own tools."""

    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    hints: Hints
    command: str | None = None

    @property
    def writes(self) -> bool:
        return not self.hints.read_only

    @property
    def fields(self) -> tuple[str, ...]:
        """The arguments a call passes on: the properties of the input schema, in its order."""
        return tuple(self.input_schema["properties"])


# Hints, tool by tool. Only delete destroys anything: it erases every version of what it deletes.
# create, str_replace, insert and rename change a file, but the version before stays in its history,
# so nothing is lost (destructiveHint false). create, delete and rename are idempotent: the same call
# again is refused (the file exists / does not exist) and changes nothing. str_replace and insert are
# not: inserting twice inserts twice, and a replacement can match again in its own result.
TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="memory_view",
        title="View memory",
        description=(
            "Show a directory or a file of your memory. Your memory is a directory of text files under "
            "/memories that persists across conversations; call this at the start of every task with path "
            "\"/memories\" to see what you remembered before, then view the files that matter. A directory "
            "shows its files and subdirectories up to 2 levels deep, with sizes; a file shows its lines, "
            "numbered. For part of a long file, give view_range."
        ),
        input_schema=_schema(
            {
                "path": _string(_PATH),
                "view_range": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "minItems": 2,
                    "maxItems": 2,
                    "description": "Lines to show, [start, end], numbered from 1; end -1 means to the end of the file.",
                },
            },
            ("path",),
        ),
        hints=Hints(read_only=True, destructive=False, idempotent=True),
        command="view",
    ),
    ToolSpec(
        name="memory_create",
        title="Create a memory file",
        description=(
            "Create a new file in your memory with the given text. The path must lie under /memories (for "
            "example /memories/project/notes.md); directories come into being with the files in them. Fails "
            "if the file already exists: change an existing file with memory_str_replace or memory_insert."
        ),
        input_schema=_schema(
            {"path": _string(_PATH), "file_text": _string("The whole content of the new file.")},
            ("path", "file_text"),
        ),
        hints=Hints(read_only=False, destructive=False, idempotent=True),
        command="create",
    ),
    ToolSpec(
        name="memory_str_replace",
        title="Edit a memory file",
        description=(
            "Replace text in a memory file: old_str must occur exactly once in the file, whitespace "
            "included, and is replaced by new_str (omit new_str to delete old_str). The result shows the "
            "edited lines. The version before the edit stays in memory_history."
        ),
        input_schema=_schema(
            {
                "path": _string(_PATH),
                "old_str": _string("The exact text to replace; it must occur exactly once in the file."),
                "new_str": _string("The text to put in its place; omit it to delete old_str."),
            },
            ("path", "old_str"),
        ),
        hints=Hints(read_only=False, destructive=False, idempotent=False),
        command="str_replace",
    ),
    ToolSpec(
        name="memory_insert",
        title="Insert into a memory file",
        description=(
            "Insert text into a memory file after line insert_line: 0 inserts before the first line, the "
            "file's number of lines appends at the end. The version before stays in memory_history."
        ),
        input_schema=_schema(
            {
                "path": _string(_PATH),
                "insert_line": {
                    "type": "integer",
                    "description": "The line after which to insert, numbered from 1; 0 inserts at the top.",
                },
                "insert_text": _string("The text to insert."),
            },
            ("path", "insert_line", "insert_text"),
        ),
        hints=Hints(read_only=False, destructive=False, idempotent=False),
        command="insert",
    ),
    ToolSpec(
        name="memory_delete",
        title="Delete from memory",
        description=(
            "Delete a file, or a directory and every file in it, from your memory. This erases every "
            "version of the content for good: it cannot be undone, nor recovered through memory_history. "
            "Use it for memories that are wrong or obsolete, or that the user asked you to forget."
        ),
        input_schema=_schema({"path": _string(_PATH)}, ("path",)),
        hints=Hints(read_only=False, destructive=True, idempotent=True),
        command="delete",
    ),
    ToolSpec(
        name="memory_rename",
        title="Rename in memory",
        description=(
            "Rename or move a file or a directory within your memory. The destination must not exist yet; "
            "both paths lie under /memories. The files keep their history."
        ),
        input_schema=_schema(
            {
                "old_path": _string("The file or directory to move, under /memories."),
                "new_path": _string("Where to move it, under /memories; it must not exist yet."),
            },
            ("old_path", "new_path"),
        ),
        hints=Hints(read_only=False, destructive=False, idempotent=True),
        command="rename",
    ),
    ToolSpec(
        name=SEARCH_TOOL_NAME,
        title="Search memory",
        description=(
            "Search the files of your memory for words, and get the paths of the files that match best, "
            "best first, each with its matching lines numbered as memory_view numbers them. Use it when "
            "memory holds many files, or to find where something was noted; then memory_view a file to read "
            "it whole. The query is words (a file matching any of them is found; more, and rarer, matches "
            "rank higher), \"a phrase\" in quotes, word* for every word starting with word, and -word to "
            "leave out files holding it; case and accents do not matter. path narrows the search to a "
            "directory (or a file). mode: hybrid also finds a file that says the same thing in other words (the "
            "default when the server has an embedder), semantic matches by meaning alone, lexical by words alone."
        ),
        input_schema=SEARCH_INPUT_SCHEMA,
        hints=Hints(read_only=True, destructive=False, idempotent=True),
    ),
    ToolSpec(
        name="memory_history",
        title="History of a memory file",
        description=(
            "Show every version of a memory file, oldest first: when and by which agent each was written, "
            "the path it had then, and its content, its lines numbered as memory_view numbers them. Use it "
            "to see what a file said before an edit or a rename. A deleted file has no history left."
        ),
        input_schema=_schema({"path": _string("A file under /memories.")}, ("path",)),
        hints=Hints(read_only=True, destructive=False, idempotent=True),
    ),
    ToolSpec(
        name="memory_verify",
        title="Verify the memory store",
        description=(
            "Check the integrity of the memory store: every entry of its append-only, SHA-256 hash-chained "
            "log, every link and payload digest, every erasure. For the store's administrator (admin on *), "
            "reports the whole chain: the number of entries, its head and every problem found. For any other "
            "agent, reports what it can read: the versions of its files in the scopes this server serves, "
            "every problem among them, and whether the chain has problems elsewhere."
        ),
        input_schema=_schema({}, ()),
        hints=Hints(read_only=True, destructive=False, idempotent=True),
    ),
)

_BY_NAME = {tool.name: tool for tool in TOOLS}


def tools_for(read_only: bool) -> tuple[ToolSpec, ...]:
    """The tools a server offers: a read-only server does not list the tools that write."""
    return tuple(tool for tool in TOOLS if not (read_only and tool.writes))


def call_tool(
    server: MnemoMemoryToolServer, name: str, arguments: Mapping[str, Any] | None, read_only: bool = False
) -> CommandResult:
    """Run one tool call and return its result. Never raises."""
    tool = _BY_NAME.get(name)
    if tool is None or (read_only and tool.writes):
        # (the name quoted as the memory tool quotes a value the model sent, so the result stays bounded)
        return CommandResult(f"Error: Unknown tool: {echo_sent(name, server.echo_limit)}", True)
    if arguments is not None and not isinstance(arguments, Mapping):
        return CommandResult("Error: Invalid input: expected an object", True)
    try:
        # Only the tool's own fields: a `command` argument cannot turn one tool into another.
        args = {k: arguments[k] for k in tool.fields if k in arguments} if arguments is not None else {}
    except Exception:  # a mapping of the caller's whose reading raises
        return CommandResult("Error: Invalid input: the object could not be read", True)
    if tool.command is not None:
        return server.execute({"command": tool.command, **args})
    if tool.name == SEARCH_TOOL_NAME:
        # Checked by the search as a command's input is: `limit` is not coerced.
        return server.execute_search(args)
    runner = _history if tool.name == "memory_history" else _verify
    try:
        return runner(server, args)
    except MnemoError as exc:
        return server.error_result(exc)
    except Exception as exc:
        log.exception("%s failed", tool.name)
        return CommandResult(f"Error: Internal error ({type(exc).__name__})", True)


# -- memory_history ---------------------------------------------------------------------------------


def _history(server: MnemoMemoryToolServer, args: Mapping[str, Any]) -> CommandResult:
    path = args.get("path")
    if path is None:
        return CommandResult("Error: Missing required parameter `path` for tool `memory_history`", True)
    if not isinstance(path, str):
        return CommandResult("Error: Parameter `path` of tool `memory_history` must be a string", True)
    # The memory tool's order: the path checks, then the permission, then the lookup.
    try:
        scope = server.scope_of(path)  # with mounts, the scope that serves the path
    except InvalidInput as exc:
        return CommandResult(f"Error: {exc}", True)
    try:
        server.client.check_permission("read", scope)
    except PermissionDenied:
        agent = server.client.agent_id
        return CommandResult(f"Error: Permission denied: {agent} may not read in scope {scope}", True)
    try:
        versions = server.history(path)
    except NotFound as exc:
        return CommandResult(f"Error: {exc}", True)
    return CommandResult(format_history(path, versions, path_of=server.version_path))


def format_history(
    path: str,
    versions: list[MemoryRecord],
    max_chars: int = DEFAULT_MAX_VIEW_CHARS,
    max_total_chars: int = MAX_HISTORY_CHARS,
    path_of: Callable[[MemoryRecord], str] | None = None,
) -> str:
    """Every version of a file, oldest first: a header line for each, then its content, each line
    numbered as a view numbers it (`{n:>6}\t{line}`): a header begins with `---`, a line of content with
    its number, so that no version's text (another writer's, in a shared scope) can pass for the header
    of a version by someone else.

    A version longer than `max_chars` characters (numbered) is cut there, with a note saying how much
    was left out. The contents shown add up to at most `max_total_chars`, counted from the newest version back:
    an older version past that budget shows only its header and its length. `path_of` gives the path
    a version had as the server lists it (default: its path tag).
    """
    n = len(versions)
    budget = max_total_chars
    bodies: list[str] = []
    for record in reversed(versions):
        content = record.content
        text = content if isinstance(content, str) else content.decode("utf-8", errors="replace")
        text = "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(text.split("\n"), 1))
        if len(text) > max_chars:
            text = f"{text[:max_chars]}\n... ({len(text) - max_chars} more characters)"
        if len(text) > budget:
            text = f"... ({len(text)} characters left out: the newer versions fill this result)"
        else:
            budget -= len(text)
        bodies.append(text)
    out = [f"History of {path}: {n} version{'s' if n != 1 else ''}, oldest first"]
    for record, text in zip(versions, reversed(bodies), strict=True):
        when = record.updated_at.isoformat(timespec="seconds").replace("+00:00", "Z")
        out.append(
            f"--- version {record.version}, {when}, by {record.agent_id}, "
            f"at {(path_of or tagged_path)(record)} (seq {record.seq})"
        )
        out.append(text)
    return "\n".join(out)


# -- memory_verify ----------------------------------------------------------------------------------


def _verify(server: MnemoMemoryToolServer, args: Mapping[str, Any]) -> CommandResult:
    """The whole chain's report for an admin on `*`; for any other agent, the chain checked for the
    records it can read in the scopes the server serves (`MnemoClient.verify_scopes`)."""
    client = server.client
    try:
        return CommandResult(server.hide_store(format_verify(client.verify())))
    except PermissionDenied:
        pass
    readable = []
    for scope in dict.fromkeys(server.mounts.values()):
        try:
            client.check_permission("read", scope)
        except PermissionDenied:
            continue  # a mount the agent may not read is not shown
        readable.append(scope)
    if not readable:
        return CommandResult(f"Error: Permission denied: {client.agent_id} may not read in scope {server.scope}", True)
    return CommandResult(server.hide_store(format_scope_verify(client.verify_scopes(readable))))


def _problem_lines(problems: tuple[Problem, ...], max_problems: int) -> list[str]:
    lines = []
    for problem in problems[:max_problems]:
        where = [f"seq {problem.seq}"] if problem.seq is not None else []
        if problem.offset is not None:
            where.append(f"offset {problem.offset}")
        lines.append(f"problem [{problem.kind}] {', '.join(where) or '-'}: {problem.message}")
    if len(problems) > max_problems:
        lines.append(f"... and {len(problems) - max_problems} more problems (mnemo verify lists them all)")
    return lines


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def format_verify(report: VerifyReport, max_problems: int = MAX_LISTED_PROBLEMS) -> str:
    """A verification in a few lines: the verdict, the head, erasures and checkpoints, the problems."""
    if report.ok:
        lines = [f"OK: the chain is intact: {report.entries} entries verified"]
    else:
        lines = [f"FAILED: {_count(len(report.problems), 'problem')} in {report.entries} entries read"]
    if report.head_seq >= 0:
        lines.append(f"head: {report.head_seq}:{report.head_hash}")
    lines.append(f"erased versions: {report.erased}; signed checkpoints verified: {report.checkpoints}")
    lines += _problem_lines(report.problems, max_problems)
    lines.extend(f"note: {note}" for note in report.notes)
    return "\n".join(lines)


SCOPE_REPORT_LIMITS = (
    "not shown: the chain's length and head, its erasures and other scopes: the whole report needs admin on *"
)


def format_scope_verify(report: ScopeReport, max_problems: int = MAX_LISTED_PROBLEMS) -> str:
    """A verification of what an agent can read, in a few lines: the verdict and what it covered, the
    problems at those versions, whether the chain has problems elsewhere, and what is not shown."""
    scopes = f"scope{'s' if len(report.scopes) != 1 else ''} {', '.join(report.scopes)}"
    covered = (
        f"the {_count(report.versions, 'version')} of the {_count(report.records, 'record')} you can read "
        f"({scopes})"
    )
    elsewhere = "the chain has problems outside what you can read: the owner's `mnemo verify` lists them"
    if report.ok:
        lines = [f"OK: the chain is intact; this check covers {covered}"]
    elif report.problems:
        lines = [f"FAILED: {_count(len(report.problems), 'problem')} in {covered}"]
        lines += _problem_lines(report.problems, max_problems)
        if report.elsewhere:
            lines.append(elsewhere)
    else:
        lines = [f"FAILED: {elsewhere}; {covered} show none"]
    lines.append(SCOPE_REPORT_LIMITS)
    return "\n".join(lines)

