"""The permission check, end to end on both backends: a pattern grants the scopes that start with its
whole prefix and nothing shorter; grants and revokes made inside a transaction bind the permission checks
that follow, inside it and after it, and an abandoned one undoes them; what a reader may read follows
every grant and revoke, made by another client or its own, at once, though its scope filter is kept
between reads; and the Acl itself answers with booleans, counts its changes, and round-trips as plain
sorted data."""

from __future__ import annotations

import pytest
from helpers.acl import state

from mnemo import MnemoClient
from mnemo.acl import Acl
from mnemo.errors import PermissionDenied

# -- a pattern matches its prefix, and nothing shorter --------------------------------------------------


def test_a_pattern_matches_the_scopes_that_start_with_its_whole_prefix(pair: tuple[MnemoClient, MnemoClient]
                                                                      ) -> None:
    owner, bob = pair
    owner.grant("bob", "team:*", ["read"])
    for scope in ("team:", "team:a", "team:ab/c"):
        bob.check_permission("read", scope)
    for scope in ("team", "teamx", "team-a", "tea", "agent:owner"):
        with pytest.raises(PermissionDenied, match=f"^bob may not read in scope {scope}$"):
            bob.check_permission("read", scope)
    with pytest.raises(PermissionDenied, match="^bob may not write in scope team:a$"):
        bob.check_permission("write", "team:a")
    assert [r.content for r in bob.query(scope="team:*")] == ["team a"]


# -- grants and revokes inside a transaction, then the permission checks -------------------------------


def test_grants_and_revokes_inside_a_transaction_bind_the_checks_after_it(pair: tuple[MnemoClient, MnemoClient]
                                                                         ) -> None:
    owner, bob = pair
    with owner.transaction():
        owner.grant("bob", "team:*", ["read", "write"])
        owner.grant("bob", "team:a", ["forget"])
        owner.revoke("bob", "team:*", ["write"])
        assert owner.permissions("bob") == {"agent:bob": ("admin", "forget", "read", "write"),
                                            "team:*": ("read",), "team:a": ("forget",)}
    bob.check_permission("read", "team:b")
    bob.check_permission("forget", "team:a")
    for perm, scope in (("write", "team:a"), ("forget", "team:b"), ("admin", "team:a")):
        with pytest.raises(PermissionDenied, match=f"^bob may not {perm} in scope {scope}$"):
            bob.check_permission(perm, scope)
    with pytest.raises(PermissionDenied):
        bob.remember("x", scope="team:a")


def test_a_revoke_inside_a_transaction_binds_the_rest_of_it_on_every_backend(
    pair: tuple[MnemoClient, MnemoClient],
) -> None:
    owner, bob = pair
    owner.grant("bob", "team:*", ["admin"])
    before = state(owner)
    with pytest.raises(PermissionDenied, match="^bob may not admin in scope team:b$"), bob.transaction():
        bob.remember("in team:a", scope="team:a")
        bob.revoke("bob", "team:*", ["admin"])
        with pytest.raises(PermissionDenied, match="^bob may not write in scope team:a$"):
            bob.check_permission("write", "team:a")
        bob.grant("carol", "team:b", ["read"])  # no longer allowed: the whole transaction is undone
    assert state(owner) == before
    assert owner.permissions("bob")["team:*"] == ("admin", "forget", "read", "write")
    assert owner.permissions("carol") == {"agent:carol": ("admin", "forget", "read", "write")}
    bob.check_permission("write", "team:a")


def test_an_abandoned_transaction_undoes_its_grants(pair: tuple[MnemoClient, MnemoClient]) -> None:
    owner, bob = pair
    before = state(owner)
    with pytest.raises(RuntimeError), owner.transaction():
        owner.grant("bob", "team:*", ["admin"])
        assert owner.permissions("bob")["team:*"] == ("admin", "forget", "read", "write")
        raise RuntimeError("abandon")
    assert state(owner) == before
    with pytest.raises(PermissionDenied, match="^bob may not read in scope team:a$"):
        bob.check_permission("read", "team:a")


def test_what_a_reader_may_read_follows_each_grant_and_revoke_at_once(pair: tuple[MnemoClient, MnemoClient]) -> None:
    owner, bob = pair
    team = owner.query(scope="team:a")[0]

    def seen() -> tuple[list[str], list[str]]:
        try:
            got = [bob.get(team.id).id]
        except PermissionDenied:
            got = ["refused"]
        return got, [r.id for r in bob.query(scope="team:*")]

    with pytest.raises(PermissionDenied, match="no record"):
        bob.get(team.id)
    assert bob.query(scope="team:*") == []
    owner.grant("bob", "team:a", ["read"])
    assert seen() == ([team.id], [team.id])
    owner.revoke("bob", "team:a", ["read"])
    assert bob.query(scope="team:*") == []
    owner.grant("bob", "team:*", ["admin"])
    assert seen() == ([team.id], [team.id])
    with bob.transaction():  # its own revoke binds its own reads, inside the transaction
        bob.revoke("bob", "team:*", ["admin", "read"])
        assert bob.query(scope="team:*") == []
    assert bob.query(scope="team:*") == []
    owner.grant("bob", "team:*", ["read"])
    assert seen() == ([team.id], [team.id])


def test_the_acl_counts_its_grants_and_revokes() -> None:
    acl = Acl("owner")
    assert acl.generation == 0
    acl.grant("bob", "team:*", ["read"])
    acl.revoke("bob", "team:*", ["read"])
    acl.revoke("carol", "team:*", ["read"])  # (nothing held: counted all the same)
    assert acl.generation == 3
    assert acl.copy().generation == 0 and Acl.from_state(acl.to_state()).generation == 0


def test_the_acl_answers_with_booleans() -> None:
    acl = Acl("owner")
    acl.grant("bob", "team:*", ["read"])
    assert acl.allows("bob", "read", "team:a") is True and acl.allows("bob", "read", "team") is False
    assert acl.allows("bob", "write", "team:a") is False and acl.allows("", "read", "agent:") is False
    assert acl.may_administer("bob", "team:a") is False and acl.may_administer("owner", "team:a") is True


def test_the_acl_state_round_trips_as_plain_sorted_data() -> None:
    acl = Acl("owner")
    acl.grant("bob", "team:*", ["write", "read"])
    acl.grant("carol", "agent:bob", ["forget"])
    state_ = acl.to_state()
    assert state_ == {"owner": "owner", "grants": {"bob": {"team:*": ["read", "write"]},
                                                   "carol": {"agent:bob": ["forget"]}}}
    again = Acl.from_state(state_)
    assert (again.owner, again.grants) == (acl.owner, acl.grants)
    copy = acl.copy()
    copy.revoke("bob", "team:*", ["write"])
    assert acl.held("bob", "team:*") == ("read", "write") and copy.held("bob", "team:*") == ("read",)
