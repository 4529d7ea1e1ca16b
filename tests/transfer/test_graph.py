"""The reference MCP memory server's JSONL knowledge graph: one file per entity that keeps every
observation and every relation (both ways), names that the memory tool accepts, and every line that
is not an entity or a relation an error naming its line number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.backends import snapshot
from helpers.transfer import view

from mnemo import MnemoClient, MnemoMemoryToolServer
from mnemo.tools.paths import canonicalize
from mnemo.transfer import KnowledgeGraphSource, SourceError, import_source, open_source
from mnemo.transfer.items import file_name

GRAPH = [
    {"type": "entity", "name": "Ana", "entityType": "person",
     "observations": ["Speaks Portuguese", "Prefers night trains\nover planes"]},
    {"type": "entity", "name": "Acme Corp", "entityType": "organization", "observations": []},
    {"type": "entity", "name": "../../etc/passwd", "entityType": "odd", "observations": ["a name, not a path"]},
    {"type": "relation", "from": "Ana", "to": "Acme Corp", "relationType": "works_at"},
    {"type": "relation", "from": "Acme Corp", "to": "Ana", "relationType": "employs"},
    {"type": "relation", "from": "Ana", "to": "Bob", "relationType": "knows"},
    {"type": "relation", "from": "Ana", "to": "Acme Corp", "relationType": "works_at"},  # twice: kept once
]


def _graph(path: Path, items: list[dict[str, object]]) -> Path:
    path.write_text("\n".join(json.dumps(i) for i in items))  # as the server writes it: no newline at the end
    return path


def test_every_entity_is_a_file_that_the_memory_tool_views(client: MnemoClient, tmp_path: Path) -> None:
    server = MnemoMemoryToolServer(client)
    report = import_source(server, open_source(_graph(tmp_path / "memory.jsonl", GRAPH)))
    odd = file_name("../../etc/passwd")
    assert odd.startswith("etc_passwd-") and odd.endswith(".md")
    assert report.created == ("/memories/knowledge-graph/Ana.md", "/memories/knowledge-graph/Acme Corp.md",
                              f"/memories/knowledge-graph/{odd}")
    for path in report.created:
        text, error = view(server, path)
        assert not error, text
    ana = client.query(tags=["path:/memories/knowledge-graph/Ana.md"])[0].content
    assert ana == (
        "# Ana\n\nType: person\n\n## Observations\n- Speaks Portuguese\n- Prefers night trains\n  over planes\n\n"
        "## Relations\n- Ana works_at Acme Corp (file Acme Corp.md)\n- Acme Corp employs Ana (file Acme Corp.md)\n"
        "- Ana knows Bob\n")
    acme = client.query(tags=["path:/memories/knowledge-graph/Acme Corp.md"])[0].content
    assert acme == ("# Acme Corp\n\nType: organization\n\n## Observations\n(none)\n\n## Relations\n"
                    "- Ana works_at Acme Corp (file Ana.md)\n- Acme Corp employs Ana (file Ana.md)\n")
    head = client.head
    assert import_source(server, open_source(tmp_path / "memory.jsonl")).entry is None
    assert client.head == head


def test_the_legacy_memory_json_name_is_read_as_jsonl(tmp_path: Path) -> None:
    source = open_source(_graph(tmp_path / "memory.json", GRAPH[:2]))
    assert isinstance(source, KnowledgeGraphSource)


def test_an_entity_given_twice_keeps_every_observation(tmp_path: Path) -> None:
    path = _graph(tmp_path / "g.jsonl", [
        {"type": "entity", "name": "A", "entityType": "t", "observations": ["one", "two"]},
        {"type": "entity", "name": "A", "entityType": "t", "observations": ["two", "three"]},
    ])
    assert KnowledgeGraphSource(path).read()["A"].observations == ["one", "two", "three"]


def test_an_observation_repeated_within_a_line_is_kept_once_in_first_order(tmp_path: Path) -> None:
    path = _graph(tmp_path / "g.jsonl", [
        {"type": "entity", "name": "A", "entityType": "t", "observations": ["b", "a", "b", "a", "c"]},
        {"type": "entity", "name": "A", "entityType": "t", "observations": ["c", "d", "d", "a"]},
    ])
    assert KnowledgeGraphSource(path).read()["A"].observations == ["b", "a", "c", "d"]


def test_an_entity_of_many_observations_is_read_whole(tmp_path: Path) -> None:
    # 200,000 distinct observations and as many repeats: each is looked up once, as a graph this size
    # in one entity is read by the set of those already kept (a list would compare each with all before)
    observations = [f"o{i}" for i in range(200_000)]
    path = _graph(tmp_path / "g.jsonl", [
        {"type": "entity", "name": "A", "entityType": "t", "observations": observations + observations[::-1]},
    ])
    assert KnowledgeGraphSource(path).read()["A"].observations == observations


@pytest.mark.parametrize(("lines", "message"), [
    (['{"type":"entity","name":"a","entityType":"t","observations":[]}', "", "not json"],
     "{p} line 3: not JSON (Expecting value at column 1), so not a knowledge graph's line (an entity or a relation "
     "object)"),
    (['{"type":"note","text":"x"}'],
     '{p} line 1: not an entity or a relation of a knowledge graph (a JSON object with "type": "entity" or '
     '"relation"), got {{"type":"note","text":"x"}}'),
    (['[1, 2]'], '{p} line 1: not an entity or a relation of a knowledge graph (a JSON object with "type": '
                 '"entity" or "relation"), got [1, 2]'),
    (['{"type":"entity","name":7,"entityType":"t","observations":[]}'], "{p} line 1: `name` must be a string, got 7"),
    (['{"type":"entity","name":"a","entityType":"t","observations":"x"}'],
     "{p} line 1: `observations` must be a list of strings"),
    (['{"type":"relation","from":"a","to":"b"}'], "{p} line 1: `relationType` must be a string, got null"),
    (['{"type":"entity","name":[' + ", ".join(["1"] * 100_000) + '],"entityType":"t","observations":[]}'],
     "{p} line 1: `name` must be a string, got [" + "1, " * 26 + "1[... 299920 more characters]"),
    (['{"type":"relation","from":"a","to":"b","relationType":"r"}', "[" * 200_000 + "]" * 200_000],
     "{p} line 2: its JSON nests arrays or objects deeper than the parser reaches (thousands of levels), so not a "
     "knowledge graph's line"),
    (['{"type":"entity","name":"a","entityType":"t","observations":[],"n":' + "7" * 5000 + "}"],
     "{p} line 1: its JSON holds an integer of more than 4300 digits, more than the parser converts, so not a "
     "knowledge graph's line"),
])
def test_a_line_that_is_not_of_a_graph_is_an_error_naming_it(
    client: MnemoClient, tmp_path: Path, lines: list[str], message: str
) -> None:
    path = tmp_path / "g.jsonl"
    path.write_text("\n".join(lines) + "\n")
    before = snapshot(client.path)
    with pytest.raises(SourceError) as error:
        import_source(MnemoMemoryToolServer(client), open_source(path))
    assert str(error.value) == message.format(p=path)
    assert snapshot(client.path) == before


def test_a_graph_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "g.jsonl"
    path.write_bytes(b'{"type":"entity","name":"a","entityType":"t","observations":[]}\n{"x": "\xff"}\n')
    with pytest.raises(SourceError, match=r"g.jsonl line 2: not UTF-8 text, so not a knowledge graph's JSON Lines"):
        list(open_source(path).scan())


def test_a_byte_order_mark_at_the_start_is_not_part_of_the_first_line(tmp_path: Path) -> None:
    plain = _graph(tmp_path / "plain.jsonl", GRAPH)
    marked = tmp_path / "marked.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())  # as Windows tools save UTF-8, and as mem0's JSON may be
    assert isinstance(open_source(marked), KnowledgeGraphSource)  # `--format auto` tells it a graph
    assert KnowledgeGraphSource(marked).read() == KnowledgeGraphSource(plain).read()
    # Only at the start: one inside a line is a character of that line's JSON, an error naming the line.
    inner = tmp_path / "inner.jsonl"
    inner.write_bytes(plain.read_bytes() + b"\n\xef\xbb\xbf{}")
    with pytest.raises(SourceError, match=r"inner.jsonl line 8: not JSON \(Unexpected UTF-8 BOM"):
        KnowledgeGraphSource(inner).read()


def test_file_names_are_accepted_by_the_memory_tool_and_never_shared() -> None:
    names = ["Ana", "a/b", "a_b", ".hidden", "50%25 off", "zero\u200bwidth", "x" * 300, "é" * 200, "", "back\\slash"]
    made = [file_name(n) for n in names]
    assert len(set(made)) == len(made)
    assert made[0] == "Ana.md" and made[2] == "a_b.md"
    for name in made:
        assert "/" not in name and "%" not in name and "\\" not in name and not name.startswith(".")
        assert len(name.encode("utf-8")) <= 255
        assert canonicalize(f"/memories/{name}") == f"/memories/{name}"


def test_an_entity_holding_a_lone_surrogate_is_skipped_saying_why(client: MnemoClient, tmp_path: Path) -> None:
    # JSON lets "\ud800" stand without its pair and json.loads keeps it; UTF-8 cannot encode it
    path = _graph(tmp_path / "g.jsonl", [
        {"type": "entity", "name": "Ana", "entityType": "person", "observations": ["fine"]},
        {"type": "entity", "name": "Odd", "entityType": "t", "observations": ["half \ud800 a pair"]},
    ])
    report = import_source(MnemoMemoryToolServer(client), open_source(path))
    assert report.created == ("/memories/knowledge-graph/Ana.md",)
    assert [(s.origin, s.reason) for s in report.skipped] == [(
        f"{path} line 2", "not text: it holds U+D800, a lone surrogate (a JSON escape \\ud800 without its pair), "
                          "which UTF-8 cannot encode")]
    assert [r.content[:6] for r in client.query()] == ["# Ana\n"]
