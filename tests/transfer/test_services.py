"""mcp-memory-service's JSON export and mem0's get_all() JSON: one file per memory, its fields in a front
matter block; a document of another shape is an error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.backends import snapshot
from helpers.transfer import view

from mnemo import MnemoClient, MnemoMemoryToolServer
from mnemo.transfer import Mem0Source, MemoryServiceSource, SourceError, import_source, open_source

# The shape of examples/memory_export_template.json and sync/exporter.py of mcp-memory-service.
SERVICE_EXPORT = {
    "export_metadata": {"source_machine": "laptop", "export_timestamp": "2025-08-21T12:00:00.000000",
                        "total_memories": 2, "exporter_version": "5.0.1"},
    "memories": [
        {"content": "SQLite-vec is the default storage backend.", "content_hash": "fedcba0987654321abcd",
         "tags": ["architecture", "backend"], "created_at": 1692634800.0, "updated_at": 1692634800.0,
         "memory_type": "architectural-decision", "metadata": {"version": "v6.0.0"}, "export_source": "laptop"},
        {"content": "no hash here"},
    ],
}
# What mem0's Memory.get_all() returns (mem0/memory/main.py, MemoryItem).
MEM0 = {"results": [
    {"id": "5e6f7a8b-1111-2222-3333-444455556666", "memory": "User prefers dark mode", "hash": "abc",
     "metadata": {"source": "chat"}, "created_at": "2026-04-10T12:00:00Z", "updated_at": None, "user_id": "alice"},
    {"id": "", "memory": "no id"},
]}


def _json(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_an_mcp_memory_service_export(client: MnemoClient, tmp_path: Path) -> None:
    source = open_source(_json(tmp_path / "export.json", SERVICE_EXPORT))
    assert isinstance(source, MemoryServiceSource)
    server = MnemoMemoryToolServer(client)
    report = import_source(server, source)
    path = "/memories/mcp-memory-service/2023-08-21 SQLite-vec is the default storage backend. fedcba09.md"
    assert report.created == (path,)
    assert [(s.origin, s.reason) for s in report.skipped] == [
        (f"{tmp_path}/export.json memory 2", "not a memory of the export: it needs a string `content` and "
                                             "`content_hash`")]
    assert not view(server, path)[1]
    assert client.query(tags=[f"path:{path}"])[0].content == (
        '---\nsource: "mcp-memory-service"\ncontent_hash: "fedcba0987654321abcd"\n'
        'memory_type: "architectural-decision"\ntags: ["architecture", "backend"]\n'
        'created_at: "2023-08-21T16:20:00Z"\nupdated_at: "2023-08-21T16:20:00Z"\nmetadata: {"version": "v6.0.0"}\n'
        'export_source: "laptop"\n---\n\nSQLite-vec is the default storage backend.\n')


@pytest.mark.parametrize("doc", [MEM0, MEM0["results"], {"count": 2, "next": None, "previous": None, **MEM0}])
def test_mem0_get_all_json(client: MnemoClient, tmp_path: Path, doc: Any) -> None:
    source = open_source(_json(tmp_path / "mem0.json", doc))
    assert isinstance(source, Mem0Source)
    report = import_source(MnemoMemoryToolServer(client), source)
    path = "/memories/mem0/User prefers dark mode 5e6f7a8b.md"
    assert report.created == (path,) and len(report.skipped) == 1
    assert client.query(tags=[f"path:{path}"])[0].content == (
        '---\nsource: "mem0"\nid: "5e6f7a8b-1111-2222-3333-444455556666"\nhash: "abc"\n'
        'created_at: "2026-04-10T12:00:00Z"\nuser_id: "alice"\nmetadata: {"source": "chat"}\n---\n\n'
        'User prefers dark mode\n')


DEEP = "[" * 200_000 + "]" * 200_000  # deeper than json.loads can recurse
TOO_DEEP = "its JSON nests arrays or objects deeper than the parser reaches (thousands of levels)"
# an integer longer than int() converts (sys.get_int_max_str_digits(), 4,300 by default), where a field is read
# and where none is
LONG_INT = ('{"export_metadata": {}, "memories": [{"content": "x", "content_hash": "h", "created_at": %s}]}'
            % ("9" * 5000))
LONG_INT_MEM0 = '{"results": [{"id": "1", "memory": "x", "ignored": -%s}]}' % ("1" * 4301)
TOO_LONG = "its JSON holds an integer of more than 4300 digits, more than the parser converts"


@pytest.mark.parametrize(("fmt", "doc", "message"), [
    ("mcp-memory-service", {"memories": []},
     'cannot import {p}: not an mcp-memory-service export (a JSON object with "export_metadata" and a "memories" '
     'list)'),
    ("mem0", {"results": [{"text": "x"}]},
     'cannot import {p}: not mem0 memories (the JSON of get_all()): a JSON object with a "results" list, or a list, '
     'of memories each with an "id" and a "memory"'),
    ("mem0", "[1, 2", "cannot import {p}: not JSON (Expecting ',' delimiter at line 1 column 6), so not mem0 "
                      "memories (the JSON of get_all())"),
    ("mem0", DEEP, f"cannot import {{p}}: {TOO_DEEP}, so not mem0 memories (the JSON of get_all())"),
    ("mcp-memory-service", DEEP, f"cannot import {{p}}: {TOO_DEEP}, so not an mcp-memory-service export"),
    ("auto", DEEP, f"cannot import {{p}}: {TOO_DEEP}, so not a JSON export it reads"),
    ("mcp-memory-service", LONG_INT, f"cannot import {{p}}: {TOO_LONG}, so not an mcp-memory-service export"),
    ("mem0", LONG_INT_MEM0, f"cannot import {{p}}: {TOO_LONG}, so not mem0 memories (the JSON of get_all())"),
    ("auto", LONG_INT, f"cannot import {{p}}: {TOO_LONG}, so not a JSON export it reads"),
    ("auto", LONG_INT_MEM0, f"cannot import {{p}}: {TOO_LONG}, so not a JSON export it reads"),
])
def test_a_document_of_another_shape_is_an_error(
    client: MnemoClient, tmp_path: Path, fmt: str, doc: Any, message: str
) -> None:
    path = tmp_path / "x.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    before = snapshot(client.path)
    with pytest.raises(SourceError) as error:
        import_source(MnemoMemoryToolServer(client), open_source(path, fmt))
    assert str(error.value) == message.format(p=path)
    assert snapshot(client.path) == before


@pytest.mark.parametrize(("doc", "code"), [
    ({"export_metadata": {}, "memories": [{"content": "a \udfff", "content_hash": "h1"}]}, "DFFF"),
    ({"export_metadata": {}, "memories": [{"content": "a", "content_hash": "h1", "tags": ["\ud83d"]}]}, "D83D"),
    ([{"id": "m1", "memory": "a", "metadata": {"k": "\udc00"}}], "DC00"),
])
def test_a_memory_holding_a_lone_surrogate_is_skipped_saying_why(client: MnemoClient, tmp_path: Path,
                                                                  doc: Any, code: str) -> None:
    path = _json(tmp_path / "export.json", doc)
    before = snapshot(client.path)
    report = import_source(MnemoMemoryToolServer(client), open_source(path))
    assert report.created == () and report.entry is None
    assert [(s.origin, s.reason) for s in report.skipped] == [(
        f"{path} memory 1", f"not text: it holds U+{code}, a lone surrogate (a JSON escape \\u{code.lower()} without "
                            "its pair), which UTF-8 cannot encode")]
    assert snapshot(client.path) == before
