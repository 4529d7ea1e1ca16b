"""A transaction's overlay is built only when something reads it: the records it shows then are those an
overlay built entry by entry shows, and a transaction that only adds records applies each put once (to
the index, at commit)."""

from __future__ import annotations

import itertools
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnemo.storage.batch as batch_mod
import mnemo.storage.file.commit as store_mod
from mnemo import MnemoClient
from mnemo.acl import Acl
from mnemo.chain.codec import ZERO_HASH
from mnemo.storage.batch import Batch
from mnemo.storage.contract import Query, Rec
from mnemo.storage.file.index import Index
from mnemo.storage.file.new_rows import NewRows

AGENT = "agent-1"


class Base:
    """A committed state holding one record, r0 (version 1)."""

    def __init__(self) -> None:
        self.acl = Acl()
        self.batch = Batch(self._Empty(), (-1, ZERO_HASH, 0), transactional=True)
        self.batch.stage("put", AGENT, _body("r0", 1), b"s" * 16 + b"p", ("t",))
        self.rec = self.batch.recs["r0"]

    class _Empty:
        acl = Acl()

        def get_rec(self, rec_id: str) -> Rec | None:
            return None

    def get_rec(self, rec_id: str) -> Rec | None:
        return self.rec if rec_id == "r0" else None


def _body(rec_id: str, ver: int) -> dict[str, Any]:
    return {"digest": b"d" * 32, "id": rec_id, "scope": "s", "size": 1, "ver": ver}


# op: ("new", tag) a put of a new record; ("update", k, tag) a new version of the k-th record so far;
# ("forget", k); ("read",) a look at the overlay in between
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("new"), st.sampled_from("abc")),
        st.tuples(st.just("update"), st.integers(0, 30), st.sampled_from("abc")),
        st.tuples(st.just("forget"), st.integers(0, 30)),
        st.tuples(st.just("read")),
    ),
    max_size=40,
)


def _run(ops: list[tuple[Any, ...]], lazy: bool) -> tuple[dict[str, Rec | None], list[dict[str, Rec | None]]]:
    clock = itertools.count(1_700_000_000_000_000_000, 1000)
    real_time = batch_mod.time
    batch_mod.time = types.SimpleNamespace(time_ns=lambda: next(clock))  # type: ignore[assignment]
    try:
        return _steps(ops, lazy)
    finally:
        batch_mod.time = real_time


def _steps(ops: list[tuple[Any, ...]], lazy: bool) -> tuple[dict[str, Rec | None], list[dict[str, Rec | None]]]:
    base = Base()
    b = Batch(base, (0, base.rec.latest.hash, 0), transactional=True)
    ids, versions, reads = ["r0"], {"r0": 1}, []
    for op in ops:
        if op[0] == "new":
            rec_id = f"n{len(ids)}"
            ids.append(rec_id)
            versions[rec_id] = 1
            b.stage("put", AGENT, _body(rec_id, 1), b"s" * 16 + b"p", (op[1],), new_record=lazy)
        elif op[0] == "update":
            rec_id = ids[op[1] % len(ids)]
            if versions.get(rec_id) is None:
                continue
            versions[rec_id] = b.next_ver(rec_id)
            b.stage("put", AGENT, _body(rec_id, versions[rec_id]), b"s" * 16 + b"q", (op[2],))
        elif op[0] == "forget":
            rec_id = ids[op[1] % len(ids)]
            versions[rec_id] = None  # type: ignore[assignment]
            b.stage("forget", AGENT, {"ids": [rec_id]})
        else:
            reads.append(dict(b.recs))
    return dict(b.recs), reads


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_the_deferred_overlay_is_the_eager_one(ops: list[tuple[Any, ...]]) -> None:
    assert _run(ops, lazy=True) == _run(ops, lazy=False)


# Tag filters a read in a transaction may ask of the overlay (Batch.matching), by tag, any tag or prefix.
QUERIES = [
    Query(("a1",)), Query(("a1", "b1")), Query(("zz",)), Query(any_tags=("a1", "b1")), Query(any_tags=("zz",)),
    Query(tag_prefix="a"), Query(tag_prefix="b1"), Query(tag_prefix="zz"), Query(("a2",), tag_prefix="b"), Query(),
    Query(any_prefixes=("a",)), Query(any_tags=("b1",), any_prefixes=("a2", "zz")), Query(("b2",), any_prefixes=("a",)),
]
TAGS = st.lists(st.sampled_from(["a1", "a2", "b1", "b2"]), max_size=3).map(lambda t: tuple(sorted(set(t))))
# as OPS, with several tags a record, and ("match",) every read of QUERIES of the overlay in between
MATCH_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("new"), TAGS),
        st.tuples(st.just("update"), st.integers(0, 30), TAGS),
        st.tuples(st.just("forget"), st.integers(0, 30)),
        st.tuples(st.just("match")),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(MATCH_OPS, st.booleans())
def test_the_overlay_s_records_by_tag_are_those_a_scan_finds(ops: list[tuple[Any, ...]], lazy: bool) -> None:
    """Batch.matching finds the overlay's records through a tag index built on the first read by tag and
    kept up to date by every later put and forget: at each read, exactly what a scan of it finds, and
    after every step the index holds no record that no longer holds a tag."""
    base = Base()
    b = Batch(base, (0, base.rec.latest.hash, 0), transactional=True)
    ids, versions = ["r0"], {"r0": 1}
    for op in ops:
        if op[0] == "new":
            rec_id = f"n{len(ids)}"
            ids.append(rec_id)
            versions[rec_id] = 1
            b.stage("put", AGENT, _body(rec_id, 1), b"s" * 16 + b"p", op[1], new_record=lazy)
        elif op[0] == "update":
            rec_id = ids[op[1] % len(ids)]
            if versions.get(rec_id) is None:
                continue
            versions[rec_id] = b.next_ver(rec_id)
            b.stage("put", AGENT, _body(rec_id, versions[rec_id]), b"s" * 16 + b"q", op[2])
        elif op[0] == "forget":
            rec_id = ids[op[1] % len(ids)]
            versions[rec_id] = None  # type: ignore[assignment]
            b.stage("forget", AGENT, {"ids": [rec_id]})
        else:
            for query, scope in itertools.product(QUERIES, ["s", "other"]):
                scanned = [r for r in b.recs.values() if r is not None and r.scope == scope and query.matches(r.tags)]
                found = b.matching(query, scope.__eq__)
                assert sorted(found, key=lambda r: r.id) == sorted(scanned, key=lambda r: r.id), (query, scope)
        recs = b.recs  # puts of new records still pending go to the index here
        if b._by_tag is not None:  # once built, the index holds exactly the records that hold each tag now
            now = {tag: {i for i, r in recs.items() if r is not None and tag in r.tags} for tag in b._by_tag}
            assert b._by_tag == now and b._tags == sorted(now)


class CountingQuery(Query):
    """A query that counts the records it is asked to match."""

    calls = 0

    def matches(self, tags: tuple[str, ...]) -> bool:
        CountingQuery.calls += 1
        return super().matches(tags)


@pytest.mark.parametrize("query", [
    CountingQuery(("a1",)), CountingQuery(any_tags=("a1", "zz")), CountingQuery(tag_prefix="a"),
    CountingQuery(("a1",), tag_prefix="a"), CountingQuery(any_prefixes=("a",)),
    CountingQuery(any_tags=("zz",), any_prefixes=("a1", "c")),
])
def test_a_read_by_tag_looks_only_at_the_records_holding_it(query: Query) -> None:
    """In a transaction of many writes, a read that names a tag or a prefix goes through the records
    that hold it, not through every record the transaction wrote; a read with no tag filter does."""
    b = Batch(Base(), (0, ZERO_HASH, 0), transactional=True)
    for i in range(200):
        b.stage("put", AGENT, _body(f"n{i}", 1), b"s" * 16 + b"p", ("b1",), new_record=True)
    b.stage("put", AGENT, _body("hit", 1), b"s" * 16 + b"p", ("a1", "b1"), new_record=True)
    CountingQuery.calls = 0
    assert [r.id for r in b.matching(query, "s".__eq__)] == ["hit"]
    assert CountingQuery.calls == 1
    assert len(b.matching(CountingQuery(), "s".__eq__)) == 201 and CountingQuery.calls == 1 + 201


def test_a_transaction_of_new_records_applies_each_put_once(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = batch_mod.apply_entry

    def counting(view: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(type(view).__name__)
        return real(view, *args, **kwargs)

    real_new = Index.put_new

    def counting_new(index: Index, run: NewRows) -> None:  # the commit's new records, in bulk
        calls.extend(["Index"] * len(run.ids))
        real_new(index, run)

    monkeypatch.setattr(batch_mod, "apply_entry", counting)
    monkeypatch.setattr(store_mod, "apply_entry", counting)
    monkeypatch.setattr(Index, "put_new", counting_new)
    with MnemoClient(db_path, AGENT, durability="none") as c:
        with c.transaction():
            recs = [c.remember(f"r{i}", tags=["t"]) for i in range(50)]
        assert calls == ["Index"] * 50
        assert c.query(tags=["t"]) == recs
        calls.clear()
        with c.transaction():
            more = [c.remember(f"s{i}", tags=["t"]) for i in range(3)]
            assert c.get(more[1].id) == more[1]  # a read builds the overlay, once
            assert c.query(tags=["t"]) == recs + more
        assert calls == ["Batch"] * 3 + ["Index"] * 3
    with MnemoClient(db_path, AGENT) as again:
        assert again.query(tags=["t"]) == recs + more
