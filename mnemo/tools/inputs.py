"""Reading what the model sent: a `tool_use` block and its input (docs/MEMORY_TOOL.md §2 and §3).

Whatever object arrives, it is read into plain `str`, `int` and `list` values before anything looks at
it: subclasses are copied through the built-in types' own methods, so that no method of the object
(`__eq__`, `__hash__`, `__str__`, `__len__`, `__iter__`, `get`, a property) runs on our side after
that. Reading itself may still raise (a property that raises, a mapping whose lookup raises): the
callers turn that into an error result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, cast

from mnemo.tools.text import CommandResult, echo_sent

__all__ = [
    "DEFAULT_SEARCH_LIMIT", "INT_MAX", "INT_MIN", "MAX_SEARCH_LIMIT", "SEARCH", "read_block", "validate_input",
    "validate_search",
]

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
# The search (docs/MEMORY_TOOL.md §11): how many files it answers with, by default and at most.
DEFAULT_SEARCH_LIMIT = 10
MAX_SEARCH_LIMIT = 100

_Kind = Literal["str", "int", "range", "limit"]
_TYPE_NAMES: dict[_Kind, str] = {
    "str": "a string", "int": "an integer", "range": "a list of two integers",
    "limit": f"an integer from 1 to {MAX_SEARCH_LIMIT}",
}
_IN_RANGE = " between -2**63 and 2**63 - 1"

# command -> fields in the contract's table order: (name, kind, required)
FIELDS: dict[str, tuple[tuple[str, _Kind, bool], ...]] = {
    "view": (("path", "str", True), ("view_range", "range", False)),
    "create": (("path", "str", True), ("file_text", "str", True)),
    "str_replace": (("path", "str", True), ("old_str", "str", True), ("new_str", "str", False)),
    "insert": (("path", "str", True), ("insert_line", "int", True), ("insert_text", "str", True)),
    "delete": (("path", "str", True),),
    "rename": (("old_path", "str", True), ("new_path", "str", True)),
}
# The search's fields, in the order they are checked; it is named `search` in the error texts.
SEARCH = "search"
SEARCH_FIELDS: tuple[tuple[str, _Kind, bool], ...] = (("query", "str", True), ("path", "str", False),
                                                       ("mode", "str", False),
                                                       ("limit", "limit", False))
_PATH_FIELDS = frozenset({"path", "old_path", "new_path"})
_NOT_READ = object()  # a value of a type no field takes


class _Unreadable(Exception):
    """Reading a field of the block raised."""


def _plain_str(value: object) -> str | None:
    """`value` as a plain `str` (a subclass is copied by `str`'s own slicing), or None if it is no str."""
    if type(value) is str:
        return value
    if issubclass(type(value), str):
        return str.__getitem__(cast(str, value), slice(None))
    return None


def _plain_int(value: object) -> int | None:
    """`value` as a plain `int` (never a bool), or None if it is no int."""
    kind = type(value)
    if kind is bool or not issubclass(kind, int):
        return None
    return int.__int__(cast(int, value))


def _plain_pair(value: object) -> list[object] | None:
    """The items of a list or tuple (or a subclass), read without its own methods; None otherwise."""
    kind = type(value)
    if issubclass(kind, list):
        return list.copy(cast(list[object], value))
    if issubclass(kind, tuple):
        return list(tuple.__getitem__(cast(tuple[object, ...], value), slice(None)))
    return None


def _plain(value: object, kind: _Kind) -> object:
    """The field's value in plain built-in types, or `_NOT_READ` if it has the wrong type."""
    if kind == "str":
        text = _plain_str(value)
        return _NOT_READ if text is None else text
    if kind == "int":
        number = _plain_int(value)
        return _NOT_READ if number is None else number
    if kind == "limit":
        number = _plain_int(value)
        return _NOT_READ if number is None or not 1 <= number <= MAX_SEARCH_LIMIT else number
    items = _plain_pair(value)
    if items is None or len(items) != 2:
        return _NOT_READ
    pair = [_plain_int(item) for item in items]
    return _NOT_READ if None in pair else pair


def _lookup(source: object, name: str) -> object:
    """`source[name]` for a mapping (None when absent), without the methods a dict subclass overrides."""
    if issubclass(type(source), dict):
        return dict.get(cast(dict[str, object], source), name)
    assert isinstance(source, Mapping)
    return source.get(name)


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def validate_input(tool_input: object, echo_limit: int | None = None) -> tuple[str, dict[str, Any]] | CommandResult:
    """Check a tool_use input as §2 orders. Returns `(command, fields)` or an error result.

    `fields` holds every field of the command that was given (fields sent as `null` are absent), in
    plain built-in types, with `view_range` as a list. Echoed values are cut after `echo_limit`
    characters. An input whose reading raises is an error result; nothing here raises.
    """
    try:
        return _validate(tool_input, echo_limit)
    except Exception:  # a Mapping whose lookups raise, a property that raises, ...
        return CommandResult("Error: Invalid input: the object could not be read", True)


def validate_search(tool_input: object) -> dict[str, Any] | CommandResult:
    """Check the input of a search (docs/MEMORY_TOOL.md §11) as §2 checks a command's: `query`, then
    `path`, then `limit`, each for presence and type (`limit` an integer from 1 to MAX_SEARCH_LIMIT),
    in plain built-in types. Returns the fields given (those sent as `null` absent), or an error
    result. Any other key is ignored (a `command` too). Nothing here raises."""
    try:
        if not issubclass(type(tool_input), dict) and not isinstance(tool_input, Mapping):
            return CommandResult("Error: Invalid input: expected an object", True)
        return _fields(tool_input, SEARCH, SEARCH_FIELDS)
    except Exception:  # a Mapping whose lookups raise, a property that raises, ...
        return CommandResult("Error: Invalid input: the object could not be read", True)


def _validate(tool_input: object, echo_limit: int | None) -> tuple[str, dict[str, Any]] | CommandResult:
    if not issubclass(type(tool_input), dict) and not isinstance(tool_input, Mapping):
        return CommandResult("Error: Invalid input: expected an object", True)
    command = _plain_str(_lookup(tool_input, "command"))
    if command is None:
        return CommandResult("Error: Missing required parameter `command`", True)
    spec = FIELDS.get(command)
    if spec is None:
        return CommandResult(f"Error: Unknown command: {echo_sent(command, echo_limit)}", True)
    fields = _fields(tool_input, command, spec)
    return fields if isinstance(fields, CommandResult) else (command, fields)


def _fields(
    tool_input: object, command: str, spec: tuple[tuple[str, _Kind, bool], ...]
) -> dict[str, Any] | CommandResult:
    """The fields of `spec` read from `tool_input` (a mapping), each checked for presence, then type."""
    fields: dict[str, Any] = {}
    for name, kind, required in spec:
        raw = _lookup(tool_input, name)
        if raw is None:
            if required:
                return CommandResult(f"Error: Missing required parameter `{name}` for command `{command}`", True)
            continue
        value = _plain(raw, kind)
        type_name = _TYPE_NAMES[kind]
        if value is _NOT_READ:
            return CommandResult(f"Error: Parameter `{name}` of command `{command}` must be {type_name}", True)
        if kind == "str":
            assert isinstance(value, str)
            if name not in _PATH_FIELDS and _has_surrogate(value):
                return CommandResult(
                    f"Error: Parameter `{name}` of command `{command}` must be valid Unicode text"
                    " (it holds an unpaired surrogate)",
                    True,
                )
        elif kind != "limit":  # a limit's range is its type
            numbers = value if isinstance(value, list) else [value]
            if not all(isinstance(n, int) and INT_MIN <= n <= INT_MAX for n in numbers):
                return CommandResult(
                    f"Error: Parameter `{name}` of command `{command}` must be {type_name}{_IN_RANGE}", True
                )
        fields[name] = value
    return fields


def _field(block: object, name: str) -> object:
    try:
        if issubclass(type(block), dict) or isinstance(block, Mapping):
            return _lookup(block, name)
        return getattr(block, name, None)
    except Exception:
        raise _Unreadable(name) from None


def read_block(tool_use: object, echo_limit: int | None) -> tuple[str, object, CommandResult | None]:
    """`(tool_use_id, input, None)` for a `tool_use` block of this tool, or `(tool_use_id, None, error)`.

    A dict (or any mapping) is read by key, any other object by attribute (§3). Nothing here raises.
    """
    try:
        raw_id = _field(tool_use, "id")
    except _Unreadable:
        return "", None, CommandResult("Error: Invalid tool_use block: its id could not be read", True)
    tool_use_id = "" if raw_id is None else _plain_str(raw_id)
    if tool_use_id is None:
        return "", None, CommandResult("Error: Invalid tool_use block: `id` must be a string", True)
    try:
        raw_name = _field(tool_use, "name")
    except _Unreadable:
        return tool_use_id, None, CommandResult("Error: Invalid tool_use block: its name could not be read", True)
    name = "None" if raw_name is None else _plain_str(raw_name)
    if name is None:
        return tool_use_id, None, CommandResult("Error: Invalid tool_use block: `name` must be a string", True)
    if raw_name is None or name != "memory":
        return tool_use_id, None, CommandResult(f"Error: Unknown tool: {echo_sent(name, echo_limit)}", True)
    try:
        return tool_use_id, _field(tool_use, "input"), None
    except _Unreadable:
        return tool_use_id, None, CommandResult("Error: Invalid tool_use block: its input could not be read", True)
