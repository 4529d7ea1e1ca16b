"""Records of every kind a PostgreSQL schema version must keep readable, and every read that serves them:
what a migration test writes before it takes the database back to an older version, and compares after."""

from __future__ import annotations

from typing import Any

from mnemo import MnemoClient

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
