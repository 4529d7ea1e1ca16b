"""A hypothesis state machine: random operations on a MnemoClient and on a plain dict model must agree,
on each backend (every example on a fresh database of its own)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
from helpers.backends import entries
from helpers.budget import examples
from helpers.frames import check_chain
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from mnemo import MemoryRecord, MnemoClient
from mnemo.errors import Conflict, NotFound

AGENT = "agent-1"
HOME = f"agent:{AGENT}"
TAGS = ["a", "b", "c", "path:/m/x", "path:/m/x/y", "path:/m/z", "pa"]
PREFIXES = ["a", "p", "pa", "path:", "path:/m/x", "path:/m/x/", "q", ""]
SCOPES = [None, "team:x"]

contents = st.one_of(st.text(max_size=24), st.binary(max_size=24))
# a record holds at most one path: tag (docs/MEMORY_TOOL.md §4.1)
tag_sets = st.sets(st.sampled_from(TAGS), max_size=3).filter(lambda s: sum(t.startswith("path:") for t in s) <= 1)
json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
)
json_values = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
metadatas = st.dictionaries(st.text(max_size=5), json_values, max_size=3)


@dataclass
class Version:
    content: str | bytes
    tags: tuple[str, ...]
    metadata: dict[str, Any]
    scope: str


@dataclass
class Model:
    order: list[str] = field(default_factory=list)  # live ids, in creation order
    versions: dict[str, list[Version]] = field(default_factory=dict)

    def live(self, rid: str) -> bool:
        return rid in self.versions

    def select(
        self,
        tags: tuple[str, ...] = (),
        any_tags: tuple[str, ...] = (),
        tag_prefix: str | None = None,
        scope: str | None = None,
        limit: int | None = None,
    ) -> list[str]:
        out = []
        for rid in self.order:
            v = self.versions[rid][-1]
            if not set(tags) <= set(v.tags):
                continue
            if any_tags and not set(any_tags) & set(v.tags):
                continue
            if tag_prefix is not None and not any(t.startswith(tag_prefix) for t in v.tags):
                continue
            if scope is not None and v.scope != scope:
                continue
            out.append(rid)
        return out if limit is None else out[:limit]

    def remember(self, rid: str, v: Version) -> None:
        self.order.append(rid)
        self.versions[rid] = [v]

    def forget(self, rids: list[str]) -> None:
        for rid in rids:
            del self.versions[rid]
        self.order = [r for r in self.order if r not in rids]


def check_record(rec: MemoryRecord, rid: str, number: int, v: Version) -> None:
    assert rec.id == rid
    assert rec.version == number
    assert rec.content == v.content and type(rec.content) is type(v.content)
    assert rec.tags == v.tags
    assert rec.metadata == v.metadata
    assert rec.scope == v.scope
    assert rec.agent_id == AGENT


class Abort(Exception):
    pass


class StoreMachine(RuleBasedStateMachine):
    def __init__(self, new_db: Callable[[], str]) -> None:
        super().__init__()
        self.path = new_db()
        self.client = MnemoClient(self.path, AGENT, durability="none")
        self.model = Model()
        self.known: list[str] = []  # every id ever returned: live, forgotten, or from an aborted transaction

    def teardown(self) -> None:
        try:
            assert self.client.verify().ok
        finally:
            self.client.close()
        check_chain(entries(self.path))

    # -- helpers -------------------------------------------------------------------------------

    def pick(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from(self.known), label="id")

    def check_get(self, model: Model, rid: str) -> None:
        if model.live(rid):
            vs = model.versions[rid]
            check_record(self.client.get(rid), rid, len(vs), vs[-1])
        else:
            try:
                self.client.get(rid)
            except NotFound:
                return
            raise AssertionError(f"get({rid!r}) found a record the model does not have")

    def do_update(
        self,
        model: Model,
        rid: str,
        content: str | bytes | None,
        tags: set[str] | None,
        metadata: dict[str, Any] | None,
        expected: int | None,
    ) -> MemoryRecord:
        rec = self.client.update(
            rid,
            content=content,
            tags=None if tags is None else sorted(tags, reverse=True),
            metadata=metadata,
            expected_version=expected,
        )
        old = model.versions[rid][-1]
        new = Version(
            old.content if content is None else content,
            old.tags if tags is None else tuple(sorted(tags)),
            old.metadata if metadata is None else copy.deepcopy(metadata),
            old.scope,
        )
        model.versions[rid].append(new)
        check_record(rec, rid, len(model.versions[rid]), new)
        return rec

    # -- rules ---------------------------------------------------------------------------------

    @initialize(data=st.data(), n=st.integers(2, 8))
    def seed(self, data: st.DataObject, n: int) -> None:
        for _ in range(n):
            self.remember_many(data, 1)

    @rule(data=st.data(), n=st.integers(1, 4))
    def remember_many(self, data: st.DataObject, n: int) -> None:
        for _ in range(n):
            self.remember(
                data.draw(contents, label="content"),
                data.draw(tag_sets, label="tags"),
                data.draw(st.none() | metadatas, label="metadata"),
                data.draw(st.sampled_from(SCOPES), label="scope"),
            )

    @rule(content=contents, tags=tag_sets, metadata=st.none() | metadatas, scope=st.sampled_from(SCOPES))
    def remember(
        self, content: str | bytes, tags: set[str], metadata: dict[str, Any] | None, scope: str | None
    ) -> None:
        rec = self.client.remember(content, tags=list(tags), metadata=metadata, scope=scope)
        v = Version(content, tuple(sorted(tags)), copy.deepcopy(metadata or {}), scope or HOME)
        check_record(rec, rec.id, 1, v)
        assert rec.id not in self.known
        self.model.remember(rec.id, v)
        self.known.append(rec.id)

    @precondition(lambda self: bool(self.known))
    @rule(
        data=st.data(),
        content=st.none() | contents,
        tags=st.none() | tag_sets,
        metadata=st.none() | metadatas,
        expect=st.sampled_from(["none", "right", "wrong"]),
    )
    def update(
        self,
        data: st.DataObject,
        content: str | bytes | None,
        tags: set[str] | None,
        metadata: dict[str, Any] | None,
        expect: str,
    ) -> None:
        rid = self.pick(data)
        if not self.model.live(rid):
            try:
                self.client.update(rid, content="never")
            except NotFound:
                return
            raise AssertionError("update of a forgotten or unknown id succeeded")
        current = len(self.model.versions[rid])
        if expect == "wrong":
            wrong = data.draw(st.sampled_from([current - 1, current + 1, 0, current + 7]), label="wrong")
            try:
                self.client.update(rid, content="lost", expected_version=wrong)
            except Conflict:
                return
            raise AssertionError(f"update with expected_version={wrong} (current {current}) succeeded")
        expected = current if expect == "right" else None
        self.do_update(self.model, rid, content, tags, metadata, expected)

    @precondition(lambda self: bool(self.known))
    @rule(data=st.data(), as_str=st.booleans(), with_unknown=st.booleans())
    def forget(self, data: st.DataObject, as_str: bool, with_unknown: bool) -> None:
        some_ids = st.lists(st.sampled_from(self.known), min_size=1, max_size=3, unique=True)
        rids = data.draw(some_ids, label="ids")
        if with_unknown:
            rids.append("no-such-id")
        arg: str | list[str] = rids[0] if as_str else rids
        chosen = [rids[0]] if as_str else rids
        if all(self.model.live(r) for r in chosen):
            assert self.client.forget(arg, reason="model") == len(chosen)
            self.model.forget(chosen)
        else:
            try:
                self.client.forget(arg)
            except NotFound:
                return
            raise AssertionError(f"forget({arg!r}) with a non-live id succeeded")

    def live_tags(self) -> list[str]:
        """Tags some live record has, plus a couple of others: filters that match something, mostly."""
        found = {t for rid in self.model.order for t in self.model.versions[rid][-1].tags}
        return sorted(found | {"a", "zz"})

    def draw_tags(self, data: st.DataObject, sizes: list[int], label: str) -> list[str]:
        pool = self.live_tags()
        n = min(data.draw(st.sampled_from(sizes), label=f"{label} count"), len(pool))
        return data.draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n, unique=True), label=label)

    @rule(data=st.data(), mode=st.sampled_from(["tag", "tags", "prefix", "both"]))
    def forget_where(self, data: st.DataObject, mode: str) -> None:
        tags: list[str] = []
        prefix = None
        if mode != "prefix":
            tags = self.draw_tags(data, [2] if mode == "tags" else [1], "tags")
        if mode in ("prefix", "both"):
            prefix = data.draw(st.sampled_from(PREFIXES[:-1]), label="prefix")
        victims = self.model.select(tags=tuple(tags), tag_prefix=prefix)
        assert self.client.forget_where(tags=tags, tag_prefix=prefix, reason="model") == len(victims)
        self.model.forget(victims)

    @rule(
        data=st.data(),
        prefix=st.none() | st.sampled_from(PREFIXES),
        scope=st.sampled_from([None, None, HOME, "team:x"]),
        limit=st.none() | st.integers(0, 4),
    )
    def query(self, data: st.DataObject, prefix: str | None, scope: str | None, limit: int | None) -> None:
        tags = self.draw_tags(data, [0, 0, 1, 1, 2], "tags")
        any_tags = self.draw_tags(data, [0, 0, 1, 2, 3], "any_tags")
        kwargs: dict[str, Any] = {"tags": tags, "any_tags": any_tags, "tag_prefix": prefix}
        kwargs.update(scope=scope, limit=limit)
        expected = self.model.select(tuple(tags), tuple(any_tags), prefix, scope, limit)
        got = self.client.query(**kwargs)
        assert [r.id for r in got] == expected
        for rec in got:
            vs = self.model.versions[rec.id]
            check_record(rec, rec.id, len(vs), vs[-1])
        infos = self.client.list_records(**kwargs)
        assert [(i.id, i.version, i.tags, i.scope) for i in infos] == [
            (r.id, r.version, r.tags, r.scope) for r in got
        ]

    @precondition(lambda self: bool(self.known))
    @rule(data=st.data())
    def get(self, data: st.DataObject) -> None:
        self.check_get(self.model, self.pick(data))

    @precondition(lambda self: bool(self.known))
    @rule(data=st.data())
    def history(self, data: st.DataObject) -> None:
        rid = self.pick(data)
        if not self.model.live(rid):
            try:
                self.client.history(rid)
            except NotFound:
                return
            raise AssertionError("history of a non-live id succeeded")
        recs = self.client.history(rid)
        vs = self.model.versions[rid]
        assert len(recs) == len(vs)
        for n, (rec, v) in enumerate(zip(recs, vs, strict=True), start=1):
            check_record(rec, rid, n, v)
        assert [r.seq for r in recs] == sorted(r.seq for r in recs)
        assert len({r.created_at for r in recs}) == 1

    @rule(data=st.data(), steps=st.integers(1, 5), abort=st.booleans())
    def transaction(self, data: st.DataObject, steps: int, abort: bool) -> None:
        work = copy.deepcopy(self.model)
        created: list[str] = []
        try:
            with self.client.transaction():
                for _ in range(steps):
                    live = work.order
                    ops = ["remember", "update", "forget"] if live else ["remember"]
                    op = data.draw(st.sampled_from(ops), label="op")
                    if op == "remember":
                        content = data.draw(contents, label="content")
                        tags = data.draw(tag_sets, label="tags")
                        rec = self.client.remember(content, tags=list(tags))
                        v = Version(content, tuple(sorted(tags)), {}, HOME)
                        check_record(rec, rec.id, 1, v)
                        work.remember(rec.id, v)
                        created.append(rec.id)
                    elif op == "update":
                        rid = data.draw(st.sampled_from(live), label="id")
                        content = data.draw(contents, label="content")
                        self.do_update(work, rid, content, None, None, len(work.versions[rid]))
                    else:
                        rid = data.draw(st.sampled_from(live), label="id")
                        assert self.client.forget([rid]) == 1
                        work.forget([rid])
                    # reads inside the transaction see its own writes
                    for rid in (created[-1:] + live[:2]):
                        self.check_get(work, rid)
                    assert [r.id for r in self.client.query()] == work.order
                if abort:
                    raise Abort
        except Abort:
            pass
        self.known.extend(created)
        if not abort:
            self.model = work

    @rule(durability=st.sampled_from(["none", "none", "batch", "fsync"]))
    def reopen(self, durability: str) -> None:
        head = self.client.head
        self.client.close()
        self.client = MnemoClient(self.path, AGENT, durability=durability)
        assert self.client.recovery == []
        assert self.client.head == head

    @invariant()
    def agrees_with_model(self) -> None:
        got = self.client.query()
        assert [r.id for r in got] == self.model.order
        for rec in got:
            vs = self.model.versions[rec.id]
            check_record(rec, rec.id, len(vs), vs[-1])


def model_settings(backend: str) -> settings:
    # The same machine on both; PostgreSQL runs fewer examples, each of which costs a schema and round
    # trips to the server, to keep the suite's time in budget (and the default run half: helpers.budget).
    return settings(
        max_examples=examples(50 if backend == "file" else 20),
        stateful_step_count=30,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],  # a failing run prints its steps at once: shrinking them takes minutes
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def test_the_store_agrees_with_its_model(backend: str, new_db: Callable[[], str]) -> None:
    run_state_machine_as_test(lambda: StoreMachine(new_db), settings=model_settings(backend))
