"""Queries on PostgreSQL: the same answers as the log file for every filter (tags, any tags, a tag
prefix, a scope or scope prefix, a limit, an agent whose grants are patterns), and plans that read the
records a query names by index, on tables the planner has no statistics of."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.pg import AppRole, Schema
from helpers.pg_server import ROUTINES, undo_version_4
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemo import MnemoClient
from mnemo.chain.codec import packb, seal_put_payload
from mnemo.storage.postgres import schema as pg_schema
from mnemo.storage.postgres import sql as pg_sql
from mnemo.storage.postgres import store as pg_store
from mnemo.storage.types import Query

OWNER = "owner"
READER = "reader"
# Tags and scopes where a prefix range is easy to get wrong: LIKE's wildcards and escape, the last
# code point below the surrogates and the first above them, the last code point of all.
TAGS = ["x", "xy", "x_y", "x%", "x\\", "é", "é\U0010ffff", "\U0010ffff", "a\ud7ff", "a\ue000", "zz"]
SCOPES = ["team:a", "team:ab", "team_b", "team:a%", "t\u00e9am", "agent:owner"]
PREFIXES = sorted({t[:n] for t in TAGS for n in range(len(t) + 1)} | {"x_", "x%", "q"})
PATTERNS = ["team:a", "team:a*", "team*", "team_*", "t\u00e9am", "agent:*", "te*", "team:a%*", "*"]


def _fill(clients: list[MnemoClient]) -> None:
    """The same records, in the same order, in every client's database (so ids sort alike in each)."""
    for c in clients:
        c.grant(READER, "team:a*", ["read"])
        c.grant(READER, "t\u00e9am", ["read"])
    for i in range(60):
        tags = [TAGS[(i * 7 + k) % len(TAGS)] for k in range(i % 3)]
        scope = SCOPES[i % len(SCOPES)]
        for c in clients:
            rec = c.remember(f"record {i}", tags=tags, scope=scope)
            if i % 5 == 0:
                c.update(rec.id, tags=[TAGS[i % len(TAGS)], "zz"])
            if i % 11 == 0:
                c.forget(rec.id)


def _answer(c: MnemoClient, **query: Any) -> list[tuple[Any, ...]]:
    return [(r.content, r.version, r.tags, r.scope) for r in c.query(**query)]


@pytest.fixture
def pairs(pg: Schema, tmp_path: Path) -> Iterator[list[tuple[MnemoClient, MnemoClient]]]:
    """(log file, PostgreSQL) clients of the owner and of a reader, on the same records."""
    owners = (MnemoClient(str(tmp_path / "m.db"), OWNER, durability="none"), MnemoClient(pg.url, OWNER))
    _fill(list(owners))
    readers = (MnemoClient(str(tmp_path / "m.db"), READER), MnemoClient(pg.url, READER))
    try:
        yield [owners, readers]
    finally:
        for c in (*owners, *readers):
            c.close()


# The pair of databases is made once for all examples: they are only read.
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_filter_answers_as_the_log_file_does(
    pairs: list[tuple[MnemoClient, MnemoClient]], data: st.DataObject
) -> None:
    query = {
        "tags": data.draw(st.lists(st.sampled_from(TAGS), max_size=2, unique=True)),
        "any_tags": data.draw(st.lists(st.sampled_from(TAGS), max_size=2, unique=True)),
        "tag_prefix": data.draw(st.none() | st.sampled_from(PREFIXES)),
        "scope": data.draw(st.none() | st.sampled_from(PATTERNS)),
        "limit": data.draw(st.none() | st.integers(0, 5)),
    }
    file_client, pg_client = data.draw(st.sampled_from(pairs))
    assert _answer(pg_client, **query) == _answer(file_client, **query)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_select_by_any_tag_or_tag_prefix_answers_as_the_log_file_does(
    pairs: list[tuple[MnemoClient, MnemoClient]], data: st.DataObject
) -> None:
    """Records holding one of some tags or a tag starting with one of some prefixes (the memory tool's
    path check reads a path, the paths above it and every path beneath it so, in one statement), alone
    or beside the other filters: what Query.matches admits, on both backends."""
    query = Query(
        tags=tuple(data.draw(st.lists(st.sampled_from(TAGS), max_size=1, unique=True))),
        any_tags=tuple(data.draw(st.lists(st.sampled_from(TAGS), max_size=2, unique=True))),
        tag_prefix=data.draw(st.none() | st.sampled_from(PREFIXES)),
        limit=data.draw(st.none() | st.integers(0, 5)),
        any_prefixes=tuple(data.draw(st.lists(st.sampled_from(PREFIXES), min_size=1, max_size=2, unique=True))),
    )
    scope = data.draw(st.none() | st.sampled_from(PATTERNS))
    answers = []
    for c in data.draw(st.sampled_from(pairs)):
        found = c._store.select(query, c._scopes(scope), payloads=False)  # type: ignore[attr-defined]
        answers.append([(c.get(f.rec.id).content, f.rec.tags) for f in found])
        every = [(r.content, r.tags) for r in c.query(scope=scope) if query.matches(r.tags)]
        assert answers[-1] == every[: query.limit]
    assert answers[0] == answers[1]


def test_the_filters_are_those_of_the_log_file_on_examples(pg: Schema, tmp_path: Path) -> None:
    """A few answers spelled out, so that the comparison above cannot pass on two empty answers."""
    clients = [MnemoClient(str(tmp_path / "m.db"), OWNER, durability="none"), MnemoClient(pg.url, OWNER)]
    _fill(clients)
    for c in clients:
        def hits(prefix: str, c: MnemoClient = c) -> list[int]:
            return [int(r.content.split()[1]) for r in c.query(tag_prefix=prefix)]

        assert hits("a\ud7ff") == [23, 30, 31, 53, 56]  # not the records with only "a\ue000"
        assert hits("\U0010ffff") == [1, 23, 26, 34, 40, 56, 59]  # a prefix with no string above it
        assert hits("x_") == [8, 16, 35, 38, 41, 49]  # "x_y", never "xy": the wildcards are literal
        assert hits("x%") == [2, 13, 25, 38, 46]
        assert hits("x\\") == [2, 15, 32, 43]
        assert len(c.query(scope="team:a*")) == 27
        assert [r.scope for r in c.query(scope="team:a%*")] == ["team:a%"] * 9
    with MnemoClient(pg.url, READER) as reader:
        assert {r.scope for r in reader.query()} == {"team:a", "team:ab", "team:a%", "t\u00e9am"}


def _plan_nodes(c: MnemoClient, monkeypatch: pytest.MonkeyPatch, read: Callable[[], Any]) -> list[dict[str, Any]]:
    """Every node of the plans (EXPLAIN of each, with its parameters) of the statements `read` sends
    that read records."""
    sent: list[tuple[str, Any]] = []
    fetch = pg_store.PostgresStore._fetch

    def spy(self: pg_store.PostgresStore, sql: str, params: Any = None, conn: Any = None, binary: bool = False) -> Any:
        sent.append((sql, params))
        return fetch(self, sql, params, conn, binary)

    monkeypatch.setattr(pg_store.PostgresStore, "_fetch", spy)
    read()
    monkeypatch.undo()
    nodes: list[dict[str, Any]] = []

    def walk(node: dict[str, Any]) -> None:
        nodes.append(node)
        for child in node.get("Plans", []):
            walk(child)

    statements = [(sql, params) for sql, params in sent if "mnemo_versions" in sql]
    assert statements
    for sql, params in statements:
        rows = c._store._fetch("EXPLAIN (FORMAT JSON) " + sql, params)  # type: ignore[attr-defined]
        plan = rows[0][0] if not isinstance(rows[0][0], str) else json.loads(rows[0][0])
        walk(plan[0]["Plan"])
    return nodes


def _seq_scans(c: MnemoClient, monkeypatch: pytest.MonkeyPatch, read: Callable[[], Any]) -> list[str]:
    """The relations that the statements `read` sends which read records read by sequential scan, but
    mnemo_head: the one row of the head, which a read brings with its records (read_fresh)."""
    return [node["Relation Name"] for node in _plan_nodes(c, monkeypatch, read)
            if node.get("Node Type") == "Seq Scan" and node["Relation Name"] != "mnemo_head"]


def test_a_listing_of_paths_in_one_scope_reads_that_scope_alone(pg: Schema, monkeypatch: pytest.MonkeyPatch) -> None:
    # The memory tool's view: every scope's files are stored under path:/memories/..., so a range of the
    # tag index would read them all; the scope's own index gives its records, each tag looked up by id.
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        for start in range(0, 3000, 500):
            with c.transaction():
                for i in range(start, start + 500):
                    scope = "agent:a" if i % 300 == 0 else "agent:b"
                    c.remember(f"file {i}", tags=["memorytool", f"path:/memories/{i:04}.md"], scope=scope)
        c.remember("not a file", scope="agent:a")
        assert pg.sql("SELECT count(*) FROM pg_stats WHERE schemaname = current_schema()") == [(0,)]
        listed = c.list_records(tag_prefix="path:/memories/", scope="agent:a")
        assert [r.tags for r in listed] == [("memorytool", f"path:/memories/{i:04}.md") for i in range(0, 3000, 300)]
        nodes = _plan_nodes(c, monkeypatch, lambda: c.list_records(tag_prefix="path:/memories/", scope="agent:a"))
        indexes = {n["Index Name"] for n in nodes if "Index Name" in n}
        # the scope's records by its index, their tags by id; no range of every scope's tags
        assert {"mnemo_records_scope", "mnemo_tags_id"} <= indexes and "mnemo_tags_pkey" not in indexes
        assert [n["Relation Name"] for n in nodes if n["Node Type"] == "Seq Scan"] in ([], ["mnemo_head"])
        # another scope's files, a pattern of scopes, or another tag beside the prefix: the tag index drives
        assert len(c.list_records(tag_prefix="path:/memories/", scope="agent:*")) == 3000
        c.remember("a path: tag alone", tags=["path:/memories/0zz.md"], scope="agent:a")
        assert len(c.list_records(tag_prefix="path:/memories/0", scope="agent:a")) == 5
        assert len(c.list_records(tags=["memorytool"], tag_prefix="path:/memories/0", scope="agent:a")) == 4
        assert len(c.list_records(any_tags=["memorytool"], tag_prefix="path:/memories/0", scope="agent:a")) == 4
        tagged = _plan_nodes(c, monkeypatch, lambda: c.list_records(tags=["path:/memories/0000.md"],
                                                                     tag_prefix="path:/memories/", scope="agent:a"))
        assert "mnemo_records_scope" not in {n.get("Index Name") for n in tagged}  # the tag's own rows drive


def test_selective_queries_read_by_index_without_statistics(pg: Schema, monkeypatch: pytest.MonkeyPatch) -> None:
    with MnemoClient(pg.url, OWNER, durability="none") as c:
        for start in range(0, 3000, 500):
            with c.transaction():
                for i in range(start, start + 500):
                    scope = f"team:{i % 100}" + ("x" if i % 200 >= 100 else "")
                    c.remember(f"record {i}", tags=["hot" if i % 100 == 0 else f"t{i % 97}", f"g{i % 7}"],
                                scope=scope)
        assert pg.sql("SELECT count(*) FROM pg_stats WHERE schemaname = current_schema()") == [(0,)]
        for query in ({"tags": ["hot"]}, {"tags": ["hot", "g3"]}, {"tag_prefix": "ho"}, {"any_tags": ["hot", "t5"]},
                      {"scope": "team:7"}, {"scope": "team:42*"}, {"tags": ["g5"], "scope": "team:42*"}):
            hits = c.query(**query)
            assert 0 < len(hits) <= 100, query  # of 3000
            assert _seq_scans(c, monkeypatch, lambda query=query: c.query(**query)) == [], query
        some = hits[0]
        assert _seq_scans(c, monkeypatch, lambda: c.get(some.id)) == []
        assert _seq_scans(c, monkeypatch, lambda: c.history(some.id)) == []
        assert _seq_scans(c, monkeypatch, lambda: c.update(some.id, content="changed")) == []


def test_a_version_2_database_migrates(pg: Schema) -> None:
    """A database of schema version 2 (scopes in the database's collation, no mnemo_put) opened by a
    writer: its scopes are compared byte for byte from then on, its records and chain unchanged, and
    new puts go through mnemo_put."""
    with MnemoClient(pg.url, OWNER) as c:
        for scope in SCOPES:
            c.remember(f"in {scope}", tags=["x"], scope=scope)
        head = c.verify().head_hash
    assert pg.routines() == ROUTINES  # a new database
    # back to exactly version 2: what versions 3 and 4 add, undone
    undo_version_4(pg)
    pg.sql('ALTER TABLE mnemo_records ALTER COLUMN scope TYPE text COLLATE "default"')
    pg.sql("DROP PROCEDURE mnemo_put")
    pg.sql("DROP FUNCTION mnemo_uint")
    v2 = pg_schema.MIGRATIONS[1]
    pg.sql(v2[v2.index("CREATE FUNCTION mnemo_append(") :])
    pg.sql("UPDATE mnemo_meta SET schema_version = 2")
    with MnemoClient(pg.url, OWNER) as c:
        assert c.recovery == [f"migrated the schema from version 2 to {pg_schema.SCHEMA_VERSION}"]
        assert [r.content for r in c.query(scope="team:a*")] == ["in team:a", "in team:ab", "in team:a%"]
        assert c.verify().head_hash == head
        c.remember("after the migration", scope="team:abc")
        assert len(c.query(scope="team:a*")) == 4
        assert c.verify().ok
    assert pg.sql("SELECT collation_name FROM information_schema.columns WHERE table_schema = current_schema() "
                  "AND table_name = 'mnemo_records' AND column_name = 'scope'") == [("C",)]
    assert pg.routines() == ROUTINES  # version 2's mnemo_append went with the migration


# -- what a select acts on: the tags the chain gives a record, not the index's rows -------------------------


def test_a_tag_row_the_application_role_adds_steers_no_select(pg: Schema, app_role: AppRole) -> None:
    """A holder of the application role's credentials gives record B the tag `secret` by a row of its own in
    mnemo_tags: query, list_records and forget_where by that tag act only on the records whose put holds
    it (a limit still filled, a transaction's own records beside them), B survives untouched, and verify
    names the row."""
    with MnemoClient(app_role.url, OWNER) as c:
        b = c.remember("never tagged secret", tags=["plain"])  # first in id order: a limit meets it first
        a = c.remember("tagged secret", tags=["secret"])
        d = c.remember("tagged secret too", tags=["secret", "x"])
        app_role.sql("INSERT INTO mnemo_tags (tag, id) VALUES ('secret', %s)", [b.id])
        assert pg.sql("SELECT id FROM mnemo_tags WHERE tag = 'secret' ORDER BY id") == [(b.id,), (a.id,), (d.id,)]
        secret = [a.id, d.id]
        assert [r.id for r in c.query(tags=["secret"])] == secret
        assert [r.id for r in c.query(any_tags=["secret", "nothing"])] == secret
        assert [r.id for r in c.query(tag_prefix="secr")] == secret
        assert [r.id for r in c.query(tags=["secret"], limit=1)] == [a.id]
        assert [r.id for r in c.query(tags=["secret"], limit=2)] == secret
        assert [i.id for i in c.list_records(tags=["secret"])] == secret
        assert [i.id for i in c.list_records(tags=["secret"], limit=1)] == [a.id]
        # listed without a tag filter, B has the tags its put gives it
        assert [(i.id, i.tags) for i in c.list_records()] == [(b.id, ("plain",)), (a.id, ("secret",)),
                                                              (d.id, ("secret", "x"))]
        with c.transaction():
            e = c.remember("staged secret", tags=["secret"])
            assert [r.id for r in c.query(tags=["secret"])] == [*secret, e.id]
            assert [r.id for r in c.query(tags=["secret"], limit=1)] == [a.id]
        report = c.verify()
        assert [(p.kind, p.message) for p in report.problems] == [
            ("tables", f"mnemo_tags lists record {b.id} under tag 'secret', which its latest version does not hold")]
        assert c.forget_where(tags=["secret"]) == 3
        assert [(r.id, r.content, r.tags, r.version) for r in c.query()] == [
            (b.id, "never tagged secret", ("plain",), 1)]


def test_a_path_row_the_application_role_adds_invents_no_memory_file(pg: Schema, app_role: AppRole) -> None:
    """`memorytool` and `path:` rows of mnemo_tags given to a plain note: the memory tool neither lists nor
    serves a file there, and creates one there as at any free path; the note stays as it was."""
    from mnemo.tools import MnemoMemoryToolServer

    with MnemoClient(app_role.url, OWNER) as c:
        server = MnemoMemoryToolServer(c)
        assert not server.execute({"command": "create", "path": "/memories/real.md", "file_text": "real"}).is_error
        note = c.remember("a note, not a file", tags=["note"])
        app_role.sql("INSERT INTO mnemo_tags (tag, id) VALUES ('memorytool', %s), ('path:/memories/invented.md', %s), "
                     "('path:/memories/dir/deep.md', %s)", [note.id, note.id, note.id])
        listing = server.execute({"command": "view", "path": "/memories"}).text
        assert listing.splitlines()[1:] == ["4B\t/memories", "4B\t/memories/real.md"], listing
        missing = server.execute({"command": "view", "path": "/memories/invented.md"})
        assert missing.is_error and "does not exist" in missing.text, missing.text
        created = server.execute({"command": "create", "path": "/memories/invented.md", "file_text": "now real"})
        assert not created.is_error, created.text
        assert server.execute({"command": "view", "path": "/memories/invented.md"}).text.endswith("now real")
        assert not server.execute({"command": "create", "path": "/memories/dir", "file_text": "a file"}).is_error
        assert (c.get(note.id).content, c.get(note.id).tags) == ("a note, not a file", ("note",))


@pytest.mark.parametrize(("prefix", "successor"), [
    ("ab", "ac"),
    ("a\ud7ff", "a\ue000"),  # the surrogates are skipped: no stored text holds one
    ("a\ud7fe", "a\ud7ff"),
    ("a\U0010ffff", "b"),  # the last code point carries over to the one before it
    ("a\U0010ffff\U0010ffff", "b"),
    ("\U0010ffff", None),
    ("", None),
])
def test_a_prefix_range_ends_at_the_least_string_above_it(prefix: str, successor: str | None) -> None:
    assert pg_sql._successor(prefix) == successor


def test_a_put_whose_tags_do_not_read_is_listed_with_its_tag_rows_and_not_served(pg: Schema) -> None:
    """A put committed with tags that are not strings (no client writes one; a writer past the client
    could) is selected by its mnemo_tags rows, which list_records gives as its tags; query serves the
    fields its payload holds."""
    with MnemoClient(pg.url, OWNER) as c:
        fine = c.remember("fine", tags=["t"])
        digest, payload = seal_put_payload(b"s" * 16, packb(["odd", [1, 2], {}]))
        store: Any = c._store
        with store.writing() as batch:
            body = {"digest": digest, "id": "odd-tags", "scope": f"agent:{OWNER}", "size": 3, "ver": 1}
            batch.stage("put", OWNER, body, payload, ("t",), new_record=True, text="odd")
        listed = c.list_records(tags=["t"])
        assert sorted((r.id, r.tags) for r in listed) == sorted([(fine.id, ("t",)), ("odd-tags", ("t",))])
        served = {r.id: (r.content, r.tags) for r in c.query(tags=["t"])}
        assert served == {fine.id: ("fine", ("t",)), "odd-tags": ("odd", (1, 2))}  # the content's own fields
        assert [r.id for r in c.list_records(tags=["u"])] == [] == c.query(tags=["u"])
