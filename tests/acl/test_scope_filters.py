"""What a read may see, and what a select matches: the scopes an agent may read (everything, exact scopes,
scope prefixes) narrowed by the scope a query asks for (exact, or a `prefix*` pattern), and the tag
filters of a query (every tag, at least one of some tags, a tag prefix), each side of each rule."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from mnemo import MnemoClient
from mnemo.storage.contract import ALL_SCOPES, Query, Rec, ScopeFilter, Version


def test_a_filter_of_everything_admits_every_scope_until_a_scope_is_requested() -> None:
    assert ALL_SCOPES.admits("team:a") and ALL_SCOPES.admits("agent:x")
    assert ScopeFilter(True, requested="team:a").admits("team:a")
    assert not ScopeFilter(True, requested="team:a").admits("team:b")
    assert not ScopeFilter(True, requested="team:a").admits("team:ab")


def test_an_exact_scope_admits_that_scope_only() -> None:
    f = ScopeFilter(False, frozenset({"team:a"}))
    assert f.admits("team:a")
    assert not f.admits("team:b")
    assert not f.admits("team:ab")
    assert not ScopeFilter(False).admits("team:a")  # nothing readable: nothing admitted


def test_a_prefix_admits_the_scopes_it_starts() -> None:
    f = ScopeFilter(False, frozenset(), ("proj:",))
    assert f.admits("proj:x") and f.admits("proj:")
    assert not f.admits("pro:x")
    assert not f.admits("team:a")


def test_admits_and_matches_answer_a_bool() -> None:
    """The contract's answers are True or False, never another falsy value."""
    assert ScopeFilter(True, requested="team:a*").admits("other") is False
    assert ScopeFilter(True, requested="team:a").admits("team:b") is False
    assert ScopeFilter(True, requested="team:a").admits("team:a") is True
    assert ScopeFilter(False).admits("team:a") is False
    assert Query(tags=("a",)).matches(("b",)) is False
    assert Query(any_tags=("a",)).matches(("b",)) is False
    assert Query(tag_prefix="a").matches(("b",)) is False
    assert Query().matches(("b",)) is True


def test_a_requested_pattern_narrows_by_its_whole_prefix() -> None:
    f = ScopeFilter(True, requested="team:ab*")
    assert f.admits("team:ab") and f.admits("team:abc")
    assert not f.admits("team:ax")  # one character short of the prefix
    assert not f.admits("team:a")
    assert not f.admits("other")


def test_a_requested_scope_never_widens_what_may_be_read() -> None:
    f = ScopeFilter(False, frozenset({"team:a"}), ("proj:",))
    assert f.narrowed("team:a").admits("team:a")
    assert not f.narrowed("team:b").admits("team:b")
    assert f.narrowed("proj:*").admits("proj:x")
    assert not f.narrowed("proj:*").admits("team:a")
    assert not f.narrowed("*").admits("other:z")
    assert f.narrowed("*").admits("team:a")


def test_narrowing_keeps_what_may_be_read_and_replaces_the_request() -> None:
    f = ScopeFilter(False, frozenset({"team:a"}), ("proj:",), "team:a")
    g = f.narrowed("proj:x")
    assert g == ScopeFilter(False, frozenset({"team:a"}), ("proj:",), "proj:x")
    assert f.requested == "team:a"  # the original is unchanged
    assert f.narrowed(None) == ScopeFilter(False, frozenset({"team:a"}), ("proj:",))


def test_filters_and_queries_are_immutable_values() -> None:
    """Shared between the threads of a client: nobody may change one in place; equal ones are one key."""
    f = ScopeFilter(False, frozenset({"a"}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.everything = True  # type: ignore[misc]
    q = Query(("t",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.limit = 1  # type: ignore[misc]
    assert len({f, ScopeFilter(False, frozenset({"a"}))}) == 1
    assert len({q, Query(("t",))}) == 1


def test_a_query_needs_every_tag_of_tags() -> None:
    q = Query(tags=("a", "b"))
    assert q.matches(("a", "b", "c"))
    assert not q.matches(("a",))
    assert not q.matches(())
    assert Query().matches(())  # no filter: everything


def test_a_query_needs_one_of_any_tags() -> None:
    q = Query(any_tags=("a", "b"))
    assert q.matches(("b",))
    assert q.matches(("a", "x"))
    assert not q.matches(("x",))
    assert not q.matches(())


def test_a_query_needs_a_tag_starting_with_its_prefix() -> None:
    q = Query(tag_prefix="ab")
    assert q.matches(("x", "abc"))
    assert q.matches(("ab",))
    assert not q.matches(("a", "xab"))
    assert not q.matches(())
    assert Query(tags=("a",), tag_prefix="z").matches(("a", "zz"))
    assert not Query(tags=("a",), tag_prefix="z").matches(("a",))
    assert not Query(tags=("z",), tag_prefix="z").matches(("zz",))


def test_a_records_latest_version_is_its_last() -> None:
    v1 = Version(1, 0, 10, "a", 1, b"1" * 32, 0, 5)
    v2 = Version(2, 1, 20, "a", 2, b"2" * 32, 9, 6)
    v3 = Version(3, 2, 30, "a", 3, b"3" * 32, 19, 7)
    assert Rec("r", "s", (), (v1, v2, v3)).latest == v3
    assert Rec("r", "s", (), (v1,)).latest == v1


# -- end to end: what an agent reads, on both backends ---------------------------------------------------

@pytest.fixture
def scoped(db: str) -> Iterator[tuple[MnemoClient, MnemoClient]]:
    with MnemoClient(db, "owner", durability="none") as owner, MnemoClient(db, "bob", durability="none") as bob:
        for scope in ("team:a", "team:ab", "team:b", "proj:x", "proj:y", "other:z"):
            owner.remember(scope, tags=["t", scope.split(":")[0]], scope=scope)
        owner.grant("bob", "team:a", ["read"])
        owner.grant("bob", "proj:*", ["read"])
        yield owner, bob


def _scopes(c: MnemoClient, **kw: object) -> list[str]:
    return [r.scope for r in c.query(**kw)]  # type: ignore[arg-type]


def test_an_agent_reads_its_exact_grants_and_its_prefix_grants_only(scoped: tuple[MnemoClient, MnemoClient]) -> None:
    owner, bob = scoped
    assert _scopes(owner) == ["team:a", "team:ab", "team:b", "proj:x", "proj:y", "other:z"]
    assert _scopes(bob) == ["team:a", "proj:x", "proj:y"]
    assert _scopes(bob, scope="team:*") == ["team:a"]
    assert _scopes(owner, scope="team:a*") == ["team:a", "team:ab"]
    assert _scopes(owner, scope="team:a") == ["team:a"]
    assert _scopes(bob, scope="proj:x") == ["proj:x"]
    assert _scopes(bob, scope="team:b") == []
    assert _scopes(bob, tags=["proj"]) == ["proj:x", "proj:y"]
    assert _scopes(bob, any_tags=["team", "other"]) == ["team:a"]
    assert _scopes(bob, tag_prefix="pr") == ["proj:x", "proj:y"]
    assert [r.scope for r in bob.list_records(scope="proj:*")] == ["proj:x", "proj:y"]
