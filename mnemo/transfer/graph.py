"""The knowledge graph of the reference MCP memory server (modelcontextprotocol/servers, `src/memory`):
a JSON Lines file (`memory.jsonl`; `memory.json` before it was renamed, in the same format), one object
a line, `{"type": "entity", "name", "entityType", "observations": [...]}` or `{"type": "relation",
"from", "to", "relationType"}`; blank lines are skipped, as the server's own loader skips them.

Each entity becomes one markdown file, named after the entity, that reads well to a model: its name,
its type, every observation, and every relation it takes part in, in both directions (a relation is
written in the file of each of its two entities), each naming the file of the other entity. A line
that does not parse, or is not one of these two objects, is an error naming its line number: a graph
is imported whole or not at all. The whole graph is held in memory while it is read, as the server
itself holds it.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from mnemo.tools.text import echo
from mnemo.transfer.folder import kind_of
from mnemo.transfer.items import TOO_DEEP, TOO_LONG, Skipped, SourceError, SourceFile, file_name, stat_source, text_file

__all__ = ["KnowledgeGraphSource", "read_json_file"]

MAX_SOURCE_BYTES = 1 << 30  # a JSON source is read whole: beyond this it is refused, not tried
_SHOWN_CHARS = 80  # of a value a message quotes, as of a line


def read_json_file(path: str, what: str) -> bytes:
    """The bytes of a JSON or JSON Lines source, or SourceError (missing, not a regular file, unreadable,
    too large). A FIFO or a device is refused before it is opened."""
    st = stat_source(path)
    if not stat.S_ISREG(st.st_mode):
        raise SourceError(f"cannot import {path} as {what}: it is {kind_of(st.st_mode)}, not a regular file")
    if st.st_size > MAX_SOURCE_BYTES:
        raise SourceError(f"cannot import {path}: it is {st.st_size} bytes, over the {MAX_SOURCE_BYTES} bytes a "
                          f"{what} is read into memory for")
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise SourceError(f"cannot import {path}: {exc.strerror or exc}") from None


@dataclass
class _Entity:
    name: str
    entity_type: str
    line: int
    observations: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set, repr=False)  # the observations, for a lookup in constant time
    relations: list[tuple[str, str, str]] = field(default_factory=list)  # (from, type, to)


def _text_field(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        # the value as JSON, cut as the memory tool cuts what it echoes: a hostile line's list of a million
        # items is no message of megabytes
        raise SourceError(f"{where}: `{key}` must be a string, got {echo(json.dumps(value), _SHOWN_CHARS)}")
    return value


class KnowledgeGraphSource:
    """A reference MCP memory server's JSONL graph: one markdown file per entity."""

    format = "mcp-knowledge-graph"
    default_into = "knowledge-graph"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.label = self.path

    def scan(self) -> Iterator[SourceFile | Skipped]:
        entities = self.read()
        names = {name: file_name(name) for name in entities}
        for name, entity in entities.items():
            text = render(entity, names)
            yield text_file(names[name], f"{self.path} line {entity.line}", text)

    def read(self) -> dict[str, _Entity]:
        """The graph's entities by name, each with its observations and the relations it is in."""
        data = read_json_file(self.path, "a knowledge graph (JSON Lines)")
        try:
            text = data.decode("utf-8-sig")  # a byte order mark at the start belongs to no line
        except UnicodeDecodeError as exc:
            bad = data[: exc.start].count(b"\n") + 1
            raise SourceError(f"{self.path} line {bad}: not UTF-8 text, so not a knowledge graph's JSON "
                              "Lines") from None
        entities: dict[str, _Entity] = {}
        relations: list[tuple[str, str, str]] = []
        for number, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                continue
            where = f"{self.path} line {number}"
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SourceError(f"{where}: not JSON ({exc.msg} at column {exc.colno}), so not a knowledge "
                                  "graph's line (an entity or a relation object)") from None
            except RecursionError:
                raise SourceError(f"{where}: {TOO_DEEP}, so not a knowledge graph's line") from None
            except ValueError:
                raise SourceError(f"{where}: {TOO_LONG}, so not a knowledge graph's line") from None
            if not isinstance(item, dict) or item.get("type") not in ("entity", "relation"):
                raise SourceError(f'{where}: not an entity or a relation of a knowledge graph (a JSON object '
                                  f'with "type": "entity" or "relation"), got {line.strip()[:80]}')
            if item["type"] == "entity":
                name = _text_field(item, "name", where)
                entity_type = _text_field(item, "entityType", where)
                observations = item.get("observations")
                if not isinstance(observations, list) or not all(isinstance(o, str) for o in observations):
                    raise SourceError(f"{where}: `observations` must be a list of strings")
                entity = entities.setdefault(name, _Entity(name, entity_type, number))
                # A name given twice (a file edited by hand) is one entity: every observation is kept, once.
                # Looked up in a set, not the list: a hostile graph of many observations stays linear.
                for observation in observations:
                    if observation not in entity.seen:
                        entity.seen.add(observation)
                        entity.observations.append(observation)
            else:
                relations.append((_text_field(item, "from", where), _text_field(item, "relationType", where),
                                  _text_field(item, "to", where)))
        for relation in dict.fromkeys(relations):
            source, _, target = relation
            for name in dict.fromkeys((source, target)):
                if name in entities:
                    entities[name].relations.append(relation)
        return entities


def _item(text: str) -> str:
    """A list item; the lines after the first of a text that has several are indented under it."""
    return "- " + text.replace("\n", "\n  ")


def render(entity: _Entity, names: dict[str, str]) -> str:
    """An entity's file: name, type, observations, and its relations each way, naming the other's file."""
    out = [f"# {entity.name}", "", f"Type: {entity.entity_type}", "", "## Observations"]
    out += [_item(o) for o in entity.observations] or ["(none)"]
    out += ["", "## Relations"]
    for source, relation_type, target in entity.relations:
        other = target if source == entity.name else source
        see = f" (file {names[other]})" if other in names and other != entity.name else ""
        out.append(_item(f"{source} {relation_type} {target}{see}"))
    if not entity.relations:
        out.append("(none)")
    return "\n".join(out) + "\n"
