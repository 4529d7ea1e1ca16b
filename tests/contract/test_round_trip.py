"""The first behaviour every backend must show: a round trip through the whole API."""

from __future__ import annotations

from mnemo import MnemoClient


def test_round_trip(db: str) -> None:
    with MnemoClient(db, "owner", durability="fsync") as c:
        rec = c.remember("hello", tags=["a"], metadata={"k": 1})
        assert c.get(rec.id) == rec
        c.update(rec.id, content="hello again", expected_version=1)
        assert [r.content for r in c.history(rec.id)] == ["hello", "hello again"]
        assert [r.id for r in c.query(tags=["a"])] == [rec.id]
        assert c.forget(rec.id) == 1
        assert c.query() == []
        assert c.verify().ok
    with MnemoClient(db, "owner", readonly=True) as r:
        assert r.head[0] == 3
