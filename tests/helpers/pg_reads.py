"""Records of every kind a PostgreSQL schema version must keep readable, and every read that serves them
(what a migration test writes before it takes the database back to an older version, and compares
after); and what a read's statement looks up."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from mnemo import MnemoClient
from mnemo.storage.postgres import schema as pg_schema
from mnemo.storage.postgres import store as pg_store

from .pg import Schema

OWNER = "owner"
READER = "reader"


def varied_records(c: MnemoClient) -> dict[str, str]:
    """Records of one version and of several, in several scopes, text and bytes, one forgotten, one
    updated then forgotten, and a grant (an entry with no payload row)."""
    c.grant(READER, "team:a", ["read"])
    one = c.remember("one version", tags=["t", "u"], metadata={"k": 1})
    three = c.remember("first", tags=["t"], scope="team:a")
    c.update(three.id, content="second", tags=["t", "v"])
    c.update(three.id, content=b"\x00third, as bytes", metadata={"m": [1, 2]})
    gone = c.remember("forgotten", tags=["t"])
    c.forget(gone.id)
    twice = c.remember("updated, then forgotten", tags=["t"])
    c.update(twice.id, content="its second version")
    c.forget(twice.id, reason="asked")
    other = c.remember("in another scope", tags=["u"], scope="team:b")
    return {"one": one.id, "three": three.id, "other": other.id}


def every_read(c: MnemoClient, ids: list[str]) -> dict[str, Any]:
    """Everything a reader sees of `ids`, by every read that serves records."""
    return {
        "get": [c.get(i) for i in ids],
        "history": [c.history(i) for i in ids],
        "query": c.query(),
        "tagged": c.query(tags=["t"]),
        "scoped": c.query(scope="team:a"),
        "listed": [(r.id, r.version, r.tags, r.seq) for r in c.list_records(tags=["u"])],
    }




def taken_back(pg: Schema, undo: Callable[[Schema], None]) -> tuple[dict[str, str], tuple[Any, ...]]:
    """varied_records written on the latest schema, every read of them and the head verify gives, then
    the database taken back to an older version by `undo`: (the records made, what migrated_alike
    compares)."""
    with MnemoClient(pg.url, OWNER) as c:
        made = varied_records(c)
        ids = list(made.values())
        before = every_read(c, ids)
        assert [len(h) for h in before["history"]] == [1, 3, 1]
        head = c.verify().head_hash
    undo(pg)
    return made, (ids, before, head)


def migrated_alike(pg: Schema, version: int, taken: tuple[Any, ...]) -> None:
    """The database that taken_back took back to `version`: refused by a reader, migrated by a writer,
    which says so, reads every record as before and verifies to the same head."""
    ids, before, head = taken
    with pytest.raises(Exception, match="open it once as a writer to migrate it to version"):
        MnemoClient(pg.url, OWNER, readonly=True)
    with MnemoClient(pg.url, OWNER) as c:
        assert c.recovery == [f"migrated the schema from version {version} to {pg_schema.SCHEMA_VERSION}"]
        assert every_read(c, ids) == before
        report = c.verify()
        assert report.ok and report.head_hash == head


def written_after_a_migration(c: MnemoClient, made: dict[str, str]) -> None:
    """Writes of every kind on the records varied_records made (a remember, an update, a forget, a
    transaction), by a client of the migrated schema, each read back, and verify."""
    added = c.remember("written after the migration", tags=["t"])
    c.update(made["one"], content="one, updated after it", tags=["t"])
    c.forget(made["other"])
    with c.transaction():
        c.update(made["three"], content="fourth")
        c.remember("in a transaction", tags=["u"])
    assert [(r.id, r.content) for r in c.query(tags=["t"])] == sorted([
        (made["one"], "one, updated after it"), (made["three"], "fourth"),
        (added.id, "written after the migration")])
    assert [r.version for r in c.history(made["three"])] == [1, 2, 3, 4]
    assert c.verify().ok


def read_loops(c: MnemoClient, monkeypatch: pytest.MonkeyPatch, read: Any) -> dict[str, int]:
    """How many times the statement `read` sends that reads records (the one naming mnemo_records) looked
    up each index, run again under EXPLAIN ANALYZE with its parameters: {index: loops}; and each table by
    a row's ctid, if it did ({"tid: table": loops})."""
    sent: list[tuple[str, Any]] = []
    fetch = pg_store.PostgresStore._fetch_at  # every read's statement goes through it

    def spy(self: pg_store.PostgresStore, sql: str, params: Any = None, conn: Any = None, binary: bool = False) -> Any:
        sent.append((sql, params))
        return fetch(self, sql, params, conn, binary)

    monkeypatch.setattr(pg_store.PostgresStore, "_fetch_at", spy)
    read()
    monkeypatch.undo()
    # (the read as the store makes it; read_fresh sends it again joined to the head row)
    [(sql, params)] = [(sql, params) for sql, params in sent if "mnemo_records" in sql and "mnemo_head" not in sql]
    loops: dict[str, int] = {}

    def walk(node: dict[str, Any]) -> None:
        name = node.get("Index Name") or (f"tid: {node['Relation Name']}" if node["Node Type"] == "Tid Scan" else None)
        if name is not None:
            loops[name] = loops.get(name, 0) + node["Actual Loops"]
        for child in node.get("Plans", []):
            walk(child)

    rows = c._store._fetch("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)  # type: ignore[attr-defined]
    plan = rows[0][0] if not isinstance(rows[0][0], str) else json.loads(rows[0][0])
    walk(plan[0]["Plan"])
    return loops
