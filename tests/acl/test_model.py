"""A hypothesis state machine over several agents sharing one db: every operation by every agent agrees
with a model of who may do what. Allowed operations succeed; denied ones raise and leave every file of
the database byte for byte as it was (every table's rows, on PostgreSQL). On both backends."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
from helpers.backends import stored
from helpers.budget import examples
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from mnemo import MnemoClient, RecordUnavailable
from mnemo.errors import InvalidInput, NotFound, PermissionDenied

OWNER = "own"
AGENTS = (OWNER, "ann", "bob", "cat")
PERMS = ("admin", "forget", "read", "write")
SCOPES = tuple(f"agent:{a}" for a in AGENTS) + ("team:a", "team:b", "team:ab")
PATTERNS = SCOPES + ("team:*", "team:a*", "agent:*", "*")
TAGS = ("t0", "t1", "t2")
MISSING = "0" * 32

agents = st.sampled_from(AGENTS)
others = st.sampled_from(AGENTS[1:])
scopes = st.sampled_from(SCOPES)
patterns = st.sampled_from(PATTERNS)
perm_sets = st.one_of(
    st.sampled_from([["read"], ["read", "write"], ["forget", "read"], ["write"], ["forget"], ["admin"]]),
    st.sets(st.sampled_from(PERMS), min_size=1).map(sorted),
)
tags = st.sampled_from(TAGS)
scope_filters = st.sampled_from((None,) + PATTERNS)
# names an attacker would pick: pattern syntax, look-alikes of it and of other agents' names
bad_names = st.sampled_from(("*", "bo*", "agent:*", "agent:an*", "an\u2217", "\uff41nn", "\u0430nn", "ann ",
                             "an\u200bn"))


def home(agent: str) -> str:
    return f"agent:{agent}"


def matches(pattern: str, scope: str) -> bool:
    return scope.startswith(pattern[:-1]) if pattern.endswith("*") else scope == pattern


def covers(outer: str, inner: str) -> bool:
    return inner.startswith(outer[:-1]) if outer.endswith("*") else outer == inner


@dataclass
class MVersion:
    content: str
    tags: tuple[str, ...]
    metadata: dict[str, Any]
    agent: str


@dataclass
class MRecord:
    scope: str
    versions: list[MVersion]


@dataclass
class Model:
    grants: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (principal, pattern) -> perms
    records: dict[str, MRecord] = field(default_factory=dict)  # live ids, in creation order
    gone: list[str] = field(default_factory=list)  # forgotten ids

    def allows(self, agent: str, perm: str, scope: str) -> bool:
        if agent == OWNER or scope == home(agent):
            return True
        return any(
            p == agent and (perm in held or "admin" in held) and matches(pat, scope)
            for (p, pat), held in self.grants.items()
        )

    def may_administer(self, agent: str, pattern: str) -> bool:
        if agent == OWNER or pattern == home(agent):
            return True
        return any(
            p == agent and "admin" in held and covers(pat, pattern) for (p, pat), held in self.grants.items()
        )

    def effective(self, agent: str) -> dict[str, tuple[str, ...]]:
        out: dict[str, set[str]] = {home(agent): set(PERMS)}
        if agent == OWNER:
            out["*"] = set(PERMS)
        for (p, pat), held in self.grants.items():
            if p == agent:
                out.setdefault(pat, set()).update(PERMS if "admin" in held else held)
        return {k: tuple(sorted(v)) for k, v in sorted(out.items())}

    def readable(self, agent: str, scope_filter: str | None = None, tag: str | None = None) -> list[str]:
        return [
            rid
            for rid, rec in self.records.items()
            if self.allows(agent, "read", rec.scope)
            and (scope_filter is None or matches(scope_filter, rec.scope))
            and (tag is None or tag in rec.versions[-1].tags)
        ]


class AclMachine(RuleBasedStateMachine):
    def __init__(self, new_db: Callable[[], str]) -> None:
        super().__init__()
        self.path = new_db()
        self.clients: dict[str, MnemoClient] = {}
        for agent in AGENTS:  # the first to open creates the db and owns it
            self.clients[agent] = MnemoClient(self.path, agent, durability="none")
        self.model = Model()
        self.counter = 0
        self.missing_error = self._error_of(lambda: self.clients["bob"].get(MISSING))

    def teardown(self) -> None:
        for c in self.clients.values():
            c.close()

    # -- helpers -----------------------------------------------------------------------------------------
    @staticmethod
    def _error_of(fn: Callable[[], object]) -> Exception:
        try:
            fn()
        except Exception as exc:
            return exc
        raise AssertionError("expected an error")

    def files(self) -> dict[str, bytes]:
        return stored(self.path)

    @contextmanager
    def denied(self, exc_type: type[Exception]) -> Iterator[None]:
        """The body must raise exc_type and leave every file of the db unchanged."""
        before = self.files()
        try:
            yield
        except exc_type:
            pass
        else:
            raise AssertionError(f"expected {exc_type.__name__}")
        assert self.files() == before, "a denied operation changed the database"

    def assert_unavailable(self, fn: Callable[[], object], rid: str) -> None:
        """Raised exactly as for an id that never existed: same class, same message."""
        before = self.files()
        exc = self._error_of(fn)
        assert isinstance(exc, RecordUnavailable), repr(exc)
        assert isinstance(exc, NotFound) and isinstance(exc, PermissionDenied)
        assert type(exc) is type(self.missing_error)
        assert str(exc).replace(rid, "<id>") == str(self.missing_error).replace(MISSING, "<id>")
        assert self.files() == before

    def pick_id(self, data: st.DataObject) -> str:
        pool = [*self.model.records, *self.model.gone, MISSING]
        return str(data.draw(st.sampled_from(pool)))

    def check_record(self, rec: Any, rid: str) -> None:
        m = self.model.records[rid]
        v = m.versions[-1]
        assert (rec.id, rec.version, rec.scope) == (rid, len(m.versions), m.scope)
        assert (rec.content, rec.tags, rec.metadata, rec.agent_id) == (v.content, v.tags, v.metadata, v.agent)

    def new_content(self) -> str:
        self.counter += 1
        return f"c{self.counter}"

    # -- a populated start: some records everywhere, some grants by the owner ----------------------------
    @initialize(grants=st.lists(st.tuples(others, patterns, perm_sets), max_size=4))
    def populate(self, grants: list[tuple[str, str, list[str]]]) -> None:
        for agent in AGENTS:
            self.remember(agent, home(agent), TAGS[len(self.model.records) % len(TAGS)])
        for scope in ("team:a", "team:b", "team:ab"):
            self.remember(OWNER, scope, TAGS[len(self.model.records) % len(TAGS)])
        for principal, pattern, perms in grants:
            self.grant(OWNER, principal, pattern, perms)

    # -- records -----------------------------------------------------------------------------------------
    @rule(agent=agents, scope=scopes, tag=tags)
    def remember(self, agent: str, scope: str, tag: str) -> None:
        c = self.clients[agent]
        content = self.new_content()
        meta = {"n": self.counter}
        if not self.model.allows(agent, "write", scope):
            with self.denied(PermissionDenied):
                c.remember(content, tags=[tag], metadata=meta, scope=scope)
            return
        rec = c.remember(content, tags=[tag], metadata=meta, scope=scope)
        self.model.records[rec.id] = MRecord(scope, [MVersion(content, (tag,), meta, agent)])
        self.check_record(rec, rec.id)

    @rule(agent=agents, data=st.data())
    def get(self, agent: str, data: st.DataObject) -> None:
        rid = self.pick_id(data)
        c = self.clients[agent]
        m = self.model.records.get(rid)
        if m is None or not self.model.allows(agent, "read", m.scope):
            self.assert_unavailable(lambda: c.get(rid), rid)
            self.assert_unavailable(lambda: c.history(rid), rid)
            return
        self.check_record(c.get(rid), rid)
        hist = c.history(rid)
        assert [(h.version, h.content, h.tags, h.agent_id) for h in hist] == [
            (i + 1, v.content, v.tags, v.agent) for i, v in enumerate(m.versions)
        ]

    @rule(agent=agents, data=st.data(), tag=tags)
    def update(self, agent: str, data: st.DataObject, tag: str) -> None:
        rid = self.pick_id(data)
        c = self.clients[agent]
        m = self.model.records.get(rid)
        content = self.new_content()
        if m is None or not self.model.allows(agent, "read", m.scope):
            self.assert_unavailable(lambda: c.update(rid, content=content, tags=[tag]), rid)
            return
        if not self.model.allows(agent, "write", m.scope):
            with self.denied(PermissionDenied):
                c.update(rid, content=content, tags=[tag])
            return
        rec = c.update(rid, content=content, tags=[tag], expected_version=len(m.versions))
        m.versions.append(MVersion(content, (tag,), m.versions[-1].metadata, agent))
        self.check_record(rec, rid)

    @rule(agent=agents, data=st.data())
    def forget(self, agent: str, data: st.DataObject) -> None:
        rid = self.pick_id(data)
        c = self.clients[agent]
        m = self.model.records.get(rid)
        if m is None or not self.model.allows(agent, "read", m.scope):
            self.assert_unavailable(lambda: c.forget(rid), rid)
            return
        if not self.model.allows(agent, "forget", m.scope):
            with self.denied(PermissionDenied):
                c.forget(rid)
            return
        assert c.forget(rid) == 1
        del self.model.records[rid]
        self.model.gone.append(rid)

    @rule(agent=agents, tag=tags, scope=scope_filters)
    def forget_where(self, agent: str, tag: str, scope: str | None) -> None:
        c = self.clients[agent]
        hit = self.model.readable(agent, scope, tag)
        if any(not self.model.allows(agent, "forget", self.model.records[r].scope) for r in hit):
            with self.denied(PermissionDenied):
                c.forget_where(tags=[tag], scope=scope)
            return
        assert c.forget_where(tags=[tag], scope=scope) == len(hit)
        for rid in hit:
            del self.model.records[rid]
            self.model.gone.append(rid)

    @rule(agent=agents, tag=st.none() | tags, scope=scope_filters)
    def query(self, agent: str, tag: str | None, scope: str | None) -> None:
        c = self.clients[agent]
        want = self.model.readable(agent, scope, tag)
        got = c.query(tags=[] if tag is None else [tag], scope=scope)
        assert sorted(r.id for r in got) == sorted(want)
        for rec in got:
            self.check_record(rec, rec.id)

    @rule(agent=agents, scope1=scopes, scope2=scopes, forget_first=st.booleans())
    def transaction(self, agent: str, scope1: str, scope2: str, forget_first: bool) -> None:
        """remember in scope1 (and maybe forget it again) and remember in scope2, in one transaction: all
        of it commits, or, when any step is denied, none of it does."""
        c = self.clients[agent]
        ok1 = self.model.allows(agent, "write", scope1)
        ok_forget = not forget_first or (
            self.model.allows(agent, "read", scope1) and self.model.allows(agent, "forget", scope1)
        )
        ok2 = self.model.allows(agent, "write", scope2)
        c1, c2 = self.new_content(), self.new_content()

        def body() -> tuple[str, str]:
            with c.transaction():
                r1 = c.remember(c1, tags=["t0"], scope=scope1)
                if forget_first:
                    c.forget(r1.id)
                r2 = c.remember(c2, tags=["t1"], scope=scope2)
            return r1.id, r2.id

        if not (ok1 and ok_forget and ok2):
            with self.denied(PermissionDenied):
                body()
            return
        id1, id2 = body()
        if forget_first:
            self.model.gone.append(id1)
        else:
            self.model.records[id1] = MRecord(scope1, [MVersion(c1, ("t0",), {}, agent)])
        self.model.records[id2] = MRecord(scope2, [MVersion(c2, ("t1",), {}, agent)])

    @rule(agent=agents, scope1=scopes, scope2=scopes)
    def transaction_catching_a_denial(self, agent: str, scope1: str, scope2: str) -> None:
        """A denied write caught inside a transaction stages nothing; the rest still commits."""
        c = self.clients[agent]
        c1, c2 = self.new_content(), self.new_content()
        made: list[tuple[str, str, str]] = []
        with c.transaction():
            for content, scope in ((c1, scope1), (c2, scope2)):
                try:
                    made.append((c.remember(content, scope=scope).id, content, scope))
                except PermissionDenied:
                    assert not self.model.allows(agent, "write", scope)
                else:
                    assert self.model.allows(agent, "write", scope)
        for rid, content, scope in made:
            self.model.records[rid] = MRecord(scope, [MVersion(content, (), {}, agent)])

    # -- access control ----------------------------------------------------------------------------------
    @rule(agent=agents, principal=agents, pattern=patterns, perms=perm_sets)
    def grant(self, agent: str, principal: str, pattern: str, perms: list[str]) -> None:
        c = self.clients[agent]
        if not self.model.may_administer(agent, pattern):
            with self.denied(PermissionDenied):
                c.grant(principal, pattern, perms)
            return
        c.grant(principal, pattern, perms)
        self.model.grants.setdefault((principal, pattern), set()).update(perms)

    @rule(principal=others, pattern=patterns, perms=perm_sets)
    def owner_grants(self, principal: str, pattern: str, perms: list[str]) -> None:
        self.grant(OWNER, principal, pattern, perms)

    @rule(data=st.data(), principal=agents, perms=perm_sets)
    def delegated_grant(self, data: st.DataObject, principal: str, perms: list[str]) -> None:
        """An agent holding admin on a pattern grants on it, on a narrower or a wider one."""
        admins = sorted(k for k, held in self.model.grants.items() if "admin" in held and k[0] != OWNER)
        if not admins:
            return
        agent, outer = data.draw(st.sampled_from(admins))
        stem = outer.rstrip("*")
        near = [p for p in PATTERNS if p.rstrip("*").startswith(stem) or stem.startswith(p.rstrip("*"))]
        inner = data.draw(st.sampled_from(near))
        self.grant(agent, principal, inner, perms)

    @rule(agent=agents, principal=agents, pattern=patterns, perms=st.none() | perm_sets)
    def revoke(self, agent: str, principal: str, pattern: str, perms: list[str] | None) -> None:
        c = self.clients[agent]
        if not self.model.may_administer(agent, pattern):
            with self.denied(PermissionDenied):
                c.revoke(principal, pattern, perms)
            return
        held = self.model.grants.get((principal, pattern), set())
        if not held or (perms is not None and not held & set(perms)):
            with self.denied(InvalidInput):
                c.revoke(principal, pattern, perms)
            return
        c.revoke(principal, pattern, perms)
        held -= held if perms is None else set(perms)
        if not held:
            del self.model.grants[(principal, pattern)]

    @rule(data=st.data())
    def revoke_held(self, data: st.DataObject) -> None:
        """Revoke a grant that exists (random revokes mostly miss), by whoever the draw picks."""
        if not self.model.grants:
            return
        principal, pattern = data.draw(st.sampled_from(sorted(self.model.grants)))
        self.revoke(data.draw(agents), principal, pattern, data.draw(st.none() | perm_sets))

    @rule(agent=agents, about=agents, perm=st.sampled_from(PERMS), scope=scopes)
    def permissions(self, agent: str, about: str, perm: str, scope: str) -> None:
        c = self.clients[agent]
        assert c.permissions() == self.model.effective(agent)
        if about == agent or self.model.allows(agent, "admin", "*"):
            assert c.permissions(about) == self.model.effective(about)
        else:  # another agent's grants are not this agent's business
            with self.denied(PermissionDenied):
                c.permissions(about)
        if self.model.allows(agent, perm, scope):
            c.check_permission(perm, scope)
        else:
            with self.denied(PermissionDenied):
                c.check_permission(perm, scope)

    @rule(agent=agents, name=bad_names, op=st.sampled_from(("grant", "revoke", "permissions", "remember",
                                                           "check", "open")))
    def pattern_named(self, agent: str, name: str, op: str) -> None:
        """A name with pattern syntax, or one that reads as another name, is refused whatever the state,
        even for the owner, and changes nothing."""
        c = self.clients[agent]
        calls: dict[str, Callable[[], object]] = {
            "grant": lambda: c.grant(name, home(agent), ["read"]),
            "revoke": lambda: c.revoke(name, home(agent)),
            "permissions": lambda: c.permissions(name),
            "remember": lambda: c.remember("x", scope=name),
            "check": lambda: c.check_permission("read", name),
            "open": lambda: MnemoClient(self.path, name, durability="none"),
        }
        with self.denied(InvalidInput):
            calls[op]()

    # -- whole-db operations -----------------------------------------------------------------------------
    @rule(agent=agents)
    def compact(self, agent: str) -> None:
        c = self.clients[agent]
        if not self.model.allows(agent, "admin", "*"):
            with self.denied(PermissionDenied):
                c.compact()
            return
        c.compact()

    @rule(agent=agents, include_content=st.booleans())
    def export(self, agent: str, include_content: bool) -> None:
        """The chain names every record's id and scope: exporting it, with or without content, is an
        admin-on-`*` act."""
        c = self.clients[agent]
        if not self.model.allows(agent, "admin", "*"):
            with self.denied(PermissionDenied):
                c.export_audit(io.StringIO(), include_content=include_content)
            return
        out = io.StringIO()
        assert c.export_audit(out, include_content=include_content) > 0

    @rule(agent=agents)
    def reopen(self, agent: str) -> None:
        self.clients[agent].close()
        self.clients[agent] = MnemoClient(self.path, agent, durability="none")

    # -- invariants --------------------------------------------------------------------------------------
    @invariant()
    def listings_agree(self) -> None:
        for agent, c in self.clients.items():
            assert [r.id for r in c.list_records()] == self.model.readable(agent)


def acl_settings(backend: str) -> settings:
    # The same machine on both; fewer examples on PostgreSQL, where each costs a schema and round trips
    # (and the default run half: helpers.budget).
    return settings(
        max_examples=examples(40 if backend == "file" else 15),
        stateful_step_count=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


def test_every_agent_agrees_with_the_acl_model(backend: str, new_db: Callable[[], str]) -> None:
    run_state_machine_as_test(lambda: AclMachine(new_db), settings=acl_settings(backend))


def test_unreadable_and_missing_ids_look_the_same(db: str) -> None:
    """Spelled out once: a record in a scope bob cannot read is indistinguishable from no record."""
    with MnemoClient(db, OWNER, durability="none") as owner, MnemoClient(db, "bob", durability="none") as bob:
        secret = owner.remember("s", tags=["x"], scope="team:a")
        errors = []
        for rid in (secret.id, MISSING):
            for op in (bob.get, bob.history, bob.forget, lambda i: bob.update(i, content="y")):
                try:
                    op(rid)
                except RecordUnavailable as exc:
                    errors.append(str(exc).replace(rid, "<id>"))
        assert len(errors) == 8 and len(set(errors)) == 1
        assert bob.query(tags=["x"]) == [] and bob.list_records(scope="team:a") == []
        assert bob.forget_where(tags=["x"]) == 0
        assert owner.get(secret.id).content == "s"
