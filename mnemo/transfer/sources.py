"""Which source a path is: the format named, or told from the path (`auto`): a folder is a folder of
files, a `.jsonl` file a knowledge graph, a JSON file the export whose shape it has."""

from __future__ import annotations

import json
import os
import re
import stat

from mnemo.transfer.claude_code import ClaudeCodeSource
from mnemo.transfer.folder import FolderSource, kind_of
from mnemo.transfer.graph import KnowledgeGraphSource, read_json_file
from mnemo.transfer.items import TOO_DEEP, TOO_LONG, Source, SourceError, stat_source
from mnemo.transfer.services import Mem0Source, MemoryServiceSource, kind_of_document

__all__ = ["FORMATS", "open_source"]

FORMATS = ("auto", "folder", "claude-code", "mcp-knowledge-graph", "mcp-memory-service", "mem0")


def open_source(path: str | os.PathLike[str], format: str = "auto", claude_home: str | None = None) -> Source:
    """The source at `path` read as `format` (one of FORMATS). `auto` tells a folder (a folder of
    files), a `.jsonl` file (the reference MCP memory server's graph) and a JSON export (by its shape)
    apart; Claude Code's memory is never guessed: name it (`claude-code`, `path` being the project's
    folder; `claude_home` stands for `~/.claude`). SourceError when it cannot be read as such."""
    where = os.fspath(path)
    if format == "folder":
        return FolderSource(where)
    if format == "claude-code":
        return ClaudeCodeSource(where, claude_home)
    if format == KnowledgeGraphSource.format:
        return KnowledgeGraphSource(where)
    if format == MemoryServiceSource.format:
        return MemoryServiceSource(where)
    if format == Mem0Source.format:
        return Mem0Source(where)
    if format != "auto":
        raise SourceError(f"unknown source format {format!r}: give one of {', '.join(FORMATS)}")
    st = stat_source(where)
    if stat.S_ISDIR(st.st_mode):
        _refuse_an_export(where)
        return FolderSource(where)
    if not stat.S_ISREG(st.st_mode):
        raise SourceError(f"cannot import {where}: it is {kind_of(st.st_mode)}, neither a folder nor a file")
    if where.endswith(".jsonl"):
        return KnowledgeGraphSource(where)
    return _json_source(where)


# The start of the manifest `mnemo export` writes (json.dumps of a dict whose first key is "format").
_EXPORT_MANIFEST = re.compile(rb'\{\s*"format"\s*:\s*"(mnemo-export/[0-9]+)"')
_MANIFEST_HEAD = 4096


def _refuse_an_export(folder: str) -> None:
    """SourceError when `folder` is an export of Mnemo (its manifest.json is there): read as a folder of
    notes, its manifest and records.jsonl would become memory-tool files, and its files would land one
    folder down, at /memories/memories/...; it names the folder to import instead. Only what `auto`
    guesses: `--format folder` imports such a folder as it is."""
    try:
        fd = os.open(os.path.join(folder, "manifest.json"),
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # none, a link, unreadable: not an export's, and the folder's walk says the rest
        return
    try:
        head = os.read(fd, _MANIFEST_HEAD) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    finally:
        os.close(fd)
    match = _EXPORT_MANIFEST.match(head)
    if match is None:
        return
    export = f"cannot import {folder}: it is an export of Mnemo ({match.group(1).decode()}, by its manifest.json)"
    as_is = (f"or name --format folder to import every file of {folder}, manifest included, as it is "
             "(docs/TRANSFER.md §3)")
    files = os.path.join(folder, "memories")
    if not os.path.isdir(files):  # `--format jsonl`, or nothing but records: no folder of files to name
        raise SourceError(f"{export} that holds no memory-tool files, only records.jsonl, which the import does not "
                          "read: export with --format files to import the files (mnemo copy and mnemo backup move a "
                          f"whole database), {as_is}")
    raise SourceError(f"{export}, whose memory-tool files are in {files} (another scope's in scopes/FOLDER/memories): "
                      f"import that folder (mnemo import DB {files}), {as_is}")


def _json_source(path: str) -> Source:
    data = read_json_file(path, "a JSON export")
    try:
        kind = kind_of_document(json.loads(data))
    except RecursionError:
        raise SourceError(f"cannot import {path}: {TOO_DEEP}, so not a JSON export it reads") from None
    except ValueError as exc:
        if not isinstance(exc, (UnicodeDecodeError, json.JSONDecodeError)):
            raise SourceError(f"cannot import {path}: {TOO_LONG}, so not a JSON export it reads") from None
        kind = None
        # The reference MCP memory server's graph was once called memory.json: JSON Lines all the same.
        first = next((line for line in data.split(b"\n") if line.strip()), b"")
        try:
            item = json.loads(first)
        except (ValueError, RecursionError):  # (not JSON, or not UTF-8: both are ValueErrors)
            item = None
        if isinstance(item, dict) and item.get("type") in ("entity", "relation"):
            return KnowledgeGraphSource(path)
    if kind == MemoryServiceSource.format:
        return MemoryServiceSource(path)
    if kind == Mem0Source.format:
        return Mem0Source(path)
    raise SourceError(
        f"cannot import {path}: it is not a format the import reads by itself (a folder, a knowledge graph's "
        "JSON Lines, an mcp-memory-service export, mem0's get_all() JSON): name one with --format, or see "
        "docs/TRANSFER.md")
