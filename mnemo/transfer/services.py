"""JSON exports of other memory services, each memory to one markdown file with its fields in a front
matter block (tags, type, times, metadata) and its text below.

- mcp-memory-service (doobidoo/mcp-memory-service): the file its `MemoryExporter.export_to_json` writes
  (`scripts/sync/export_memories.py`), unchanged from 4.5.0 to 10.59 at least:
  `{"export_metadata": {...}, "memories": [{"content", "content_hash", "tags", "created_at",
  "updated_at", "memory_type", "metadata", "export_source", "embedding"?}]}`. Each memory's file is
  named after its creation date, its first words and its `content_hash`, which the service derives
  from the content, so a memory keeps its file from one export to the next.
- mem0 (mem0ai/mem0): what `get_all()` returns, saved as JSON: `{"results": [...]}` from the open-source
  `Memory.get_all` (mem0ai 1.0 to 2.0 at least), the paginated `{"count", "next", "previous",
  "results": [...]}` of the platform's `MemoryClient.get_all`, or a bare list of the same items, each
  `{"id", "memory", "hash"?, "metadata"?, "created_at"?, "updated_at"?, "user_id"?, "agent_id"?,
  "run_id"?, ...}`. Each memory's file is named after its first words and its `id`. mem0's own
  "memory export" (`create_memory_export`) fills a schema the caller gives, so it has no fixed format
  and is not read here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from mnemo.transfer.graph import read_json_file
from mnemo.transfer.items import (
    TOO_DEEP,
    TOO_LONG,
    Skipped,
    SourceError,
    SourceFile,
    file_name,
    front_matter,
    text_file,
)

__all__ = ["Mem0Source", "MemoryServiceSource", "json_document", "kind_of_document"]

_TITLE_WORDS = 8


def json_document(path: str, what: str) -> Any:
    """A JSON source read and parsed, or SourceError naming where it stops parsing."""
    data = read_json_file(path, what)
    try:
        return json.loads(data)
    except UnicodeDecodeError:
        raise SourceError(f"cannot import {path}: not UTF-8 text, so not {what}") from None
    except json.JSONDecodeError as exc:
        raise SourceError(f"cannot import {path}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}), "
                          f"so not {what}") from None
    except RecursionError:
        raise SourceError(f"cannot import {path}: {TOO_DEEP}, so not {what}") from None
    except ValueError:
        raise SourceError(f"cannot import {path}: {TOO_LONG}, so not {what}") from None


def kind_of_document(doc: Any) -> str | None:
    """Which service's export a parsed JSON document is, by its shape: a format name, or None."""
    if isinstance(doc, dict) and isinstance(doc.get("memories"), list) and isinstance(doc.get("export_metadata"), dict):
        return MemoryServiceSource.format
    items = doc.get("results") if isinstance(doc, dict) else doc
    if isinstance(items, list) and all(isinstance(i, dict) and "memory" in i and "id" in i for i in items):
        return Mem0Source.format
    return None


def _title(text: str) -> str:
    return " ".join(text.split()[:_TITLE_WORDS])


def _iso(value: Any) -> Any:
    """A timestamp as RFC 3339 text when it is seconds since the epoch (as mcp-memory-service keeps
    them); any other value as it is."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, timezone.utc).isoformat().replace("+00:00", "Z")
        except (OverflowError, OSError, ValueError):
            return value
    return value


def _note(fields: dict[str, Any], text: str) -> str:
    body = text if text.endswith("\n") else text + "\n"
    return front_matter(fields) + "\n" + body


class MemoryServiceSource:
    """An mcp-memory-service JSON export: one file per memory."""

    format = "mcp-memory-service"
    default_into = "mcp-memory-service"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.label = self.path

    def scan(self) -> Iterator[SourceFile | Skipped]:
        what = "an mcp-memory-service export"
        doc = json_document(self.path, what)
        if kind_of_document(doc) != self.format:
            raise SourceError(f'cannot import {self.path}: not {what} (a JSON object with "export_metadata" '
                              'and a "memories" list)')
        for number, memory in enumerate(doc["memories"], 1):
            origin = f"{self.path} memory {number}"
            content = memory.get("content") if isinstance(memory, dict) else None
            digest = memory.get("content_hash") if isinstance(memory, dict) else None
            if not isinstance(content, str) or not isinstance(digest, str) or not digest:
                yield Skipped(origin, "not a memory of the export: it needs a string `content` and `content_hash`")
                continue
            created = _iso(memory.get("created_at"))
            day = created[:10] if isinstance(created, str) and len(created) >= 10 else ""
            name = file_name(" ".join(p for p in (day, _title(content), digest[:8]) if p))
            fields = {
                "source": "mcp-memory-service",
                "content_hash": digest,
                "memory_type": memory.get("memory_type"),
                "tags": memory.get("tags"),
                "created_at": created,
                "updated_at": _iso(memory.get("updated_at")),
                "metadata": memory.get("metadata"),
                "export_source": memory.get("export_source"),
            }
            yield text_file(name, origin, _note(fields, content))


class Mem0Source:
    """mem0's memories as `get_all()` returns them, saved as JSON: one file per memory."""

    format = "mem0"
    default_into = "mem0"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.label = self.path

    def scan(self) -> Iterator[SourceFile | Skipped]:
        what = "mem0 memories (the JSON of get_all())"
        doc = json_document(self.path, what)
        if kind_of_document(doc) != self.format:
            raise SourceError(f'cannot import {self.path}: not {what}: a JSON object with a "results" list, or a '
                              'list, of memories each with an "id" and a "memory"')
        items = doc["results"] if isinstance(doc, dict) else doc
        for number, memory in enumerate(items, 1):
            origin = f"{self.path} memory {number}"
            text, rec_id = memory.get("memory"), memory.get("id")
            if not isinstance(text, str) or not isinstance(rec_id, str) or not rec_id:
                yield Skipped(origin, "not a mem0 memory: it needs a string `id` and `memory`")
                continue
            known = ("id", "memory", "hash", "metadata", "created_at", "updated_at")
            fields = {"source": "mem0", "id": rec_id, "hash": memory.get("hash"),
                      "created_at": memory.get("created_at"), "updated_at": memory.get("updated_at"),
                      **{k: v for k, v in memory.items() if k not in known and k != "score"},
                      "metadata": memory.get("metadata")}
            yield text_file(file_name(f"{_title(text)} {rec_id[:8]}"), origin, _note(fields, text))
