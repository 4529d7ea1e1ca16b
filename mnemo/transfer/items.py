"""What every source of an import yields, and the rules they share: a file to write (its path below the
import's folder and a way to read its bytes), or a skip with its reason; the error of a source that
cannot be read at all; names of generated files that the memory tool accepts.

A source never writes and never decides where under `/memories` its files go: it names each file by a
relative path (`notes/today.md`), which the import puts below `--into` and checks by the memory tool's
own path rules.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from mnemo.errors import InvalidInput

# json.loads recurses once a level: a document nested deeper than the interpreter allows is refused
TOO_DEEP = "its JSON nests arrays or objects deeper than the parser reaches (thousands of levels)"
# json.loads converts an integer with int(), which refuses more digits than sys.get_int_max_str_digits()
# (4,300 by default) with a ValueError that is no JSONDecodeError: such a document is refused too
TOO_LONG = (f"its JSON holds an integer of more than {sys.get_int_max_str_digits() or 'the'} digits, more than the "
            "parser converts")

__all__ = [
    "SourceError",
    "SourceFile",
    "Skipped",
    "Source",
    "data_reader",
    "file_name",
    "front_matter",
    "stat_source",
    "text_file",
    "text_of",
]


class SourceError(InvalidInput):
    """A source that cannot be imported at all: missing, unreadable, not a folder or a file of the
    format named, or a line or document that does not parse (its line number said). Nothing was written."""


def stat_source(path: str) -> os.stat_result:
    """The stat of the source a person named (a link followed: they named it), or SourceError."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise SourceError(f"cannot import {path}: No such file or directory") from None
    except OSError as exc:
        raise SourceError(f"cannot import {path}: {exc.strerror or exc}") from None


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One file a source offers: `rel` is its path below the import's folder ('/'-separated), `origin`
    where it comes from (a path on disk, `FILE line N`), and `read(limit)` its bytes, or its size in
    bytes when that is over `limit` (then nothing is read: a huge file costs no memory)."""

    rel: str
    origin: str
    read: Callable[[int], bytes | int]


@dataclass(frozen=True)
class Skipped:
    """Something of the source that is not imported, and why (`reason` says it to a person)."""

    origin: str
    reason: str


class Source(Protocol):
    """A place memories come from. `format` names its kind (`folder`, `claude-code`, ...), `label`
    says what it is in messages, and `default_into` is the folder below the memory tool's root its
    files go to when the import names none ('' for the root itself)."""

    format: str
    label: str
    default_into: str

    def scan(self) -> Iterator[SourceFile | Skipped]:
        """Every file of the source, and every skip, in a stable order. Raises SourceError for a
        source that cannot be read at all."""
        ...


BINARY = "binary: not UTF-8 text (or it holds NUL bytes), and memory-tool files are text"


def text_of(data: bytes) -> str | None:
    """The text of a file's bytes, or None for what the memory tool cannot hold as a text file: bytes
    that are not UTF-8, or hold a NUL (UTF-16 text decodes as UTF-8 with a NUL in every other byte)."""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


# What may stay in a generated file's name as it is; anything else becomes `_`. The memory tool
# refuses percent-escapes, backslashes, controls and format characters, and a name starting with `.`
# would be hidden from its listings, so none of them may come through from an entity's name.
_KEPT = re.compile(r"[^\w\- ()+,.=@&']", re.UNICODE)
_MAX_NAME_BYTES = 200  # well below the 255 bytes of a path segment, with room for the suffix


def file_name(name: str, extension: str = ".md") -> str:
    """A file name for `name` (an entity's name, a memory's first words) that the memory tool accepts
    and that reads like the name itself. When the name had to change (a character replaced, a cut, a
    leading dot), 8 hex digits of its SHA-256 are added, so that two names never share a file."""
    composed = unicodedata.normalize("NFC", name)
    kept = _KEPT.sub("_", composed).strip(" ")
    if kept.startswith((".", "_")) and not composed.startswith("_"):  # `../x`, `.hidden`: not a hidden name
        kept = kept.lstrip("._") or "_"
    encoded = kept.encode("utf-8")
    changed = kept != composed or not kept or len(encoded) > _MAX_NAME_BYTES
    if len(encoded) > _MAX_NAME_BYTES:
        kept = encoded[:_MAX_NAME_BYTES].decode("utf-8", errors="ignore").rstrip(" ")
    if changed:
        kept = f"{kept or 'unnamed'}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"
    return kept + extension


def front_matter(fields: dict[str, Any]) -> str:
    """A markdown front matter block (`---` lines around `key: value` lines), each value as JSON (which
    YAML reads too), leaving out the empty ones: how markdown vaults keep a note's fields."""
    lines = [f"{key}: {json.dumps(value, ensure_ascii=False, sort_keys=True)}"
             for key, value in fields.items() if value not in (None, "", [], {})]
    return "---\n" + "".join(line + "\n" for line in lines) + "---\n"


def text_file(rel: str, origin: str, text: str) -> SourceFile | Skipped:
    """The file a source made in memory from `text`; or, when the text holds a lone surrogate (JSON lets
    an escape such as `\\ud800` stand without its pair, and json.loads keeps it), which UTF-8 cannot
    encode, what skips it and why."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        return Skipped(origin, f"not text: it holds U+{code:04X}, a lone surrogate (a JSON escape \\u{code:04x} "
                               "without its pair), which UTF-8 cannot encode")
    return SourceFile(rel, origin, data_reader(data))


def data_reader(data: bytes) -> Callable[[int], bytes | int]:
    """`SourceFile.read` for a file a source made in memory (a knowledge graph's entity, say)."""
    return lambda limit: data if len(data) <= limit else len(data)
