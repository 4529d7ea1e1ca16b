"""The edges of the name rule and of the permission check, end to end on both backends: a word may mix
exactly the scripts Japanese (or Korean, Chinese) is written in and no others; the spacing rule holds for
names that are not ASCII; and grants and revokes made inside a transaction bind the permission checks
that follow, inside it and after it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mnemo import MnemoClient
from mnemo.acl import Acl, check_agent_id, check_name, check_pattern
from mnemo.errors import InvalidInput, PermissionDenied


def state(c: MnemoClient) -> tuple[Any, ...]:
    return c.head, [(r.id, r.scope, r.version) for r in c.query(limit=None)]


def refused(c: MnemoClient, call: Callable[[], Any], message: str) -> None:
    before = state(c)
    with pytest.raises(InvalidInput) as exc:
        call()
    assert str(exc.value) == message
    assert state(c) == before, "a refused call changed the database"


@pytest.fixture
def pair(db: str) -> Iterator[tuple[MnemoClient, MnemoClient]]:
    with MnemoClient(db, "owner", durability="none") as owner, MnemoClient(db, "bob", durability="none") as bob:
        owner.remember("team a", scope="team:a")
        yield owner, bob


# -- scripts: the mixes TR39 allows are whole, not only their parts ---------------------------------------

# Each word holds letters of every script of one allowed mix, and no other.
WHOLE_MIXES = ["\u6771\u4eac\u30bf\u30ef\u30fcabc", "abc\u6f22\u5b57\ud55c\uae00", "\u6f22\u3105x"]


@pytest.mark.parametrize("name", WHOLE_MIXES)
def test_a_word_with_every_script_of_an_allowed_mix_is_a_name(name: str, pair: tuple[MnemoClient, MnemoClient]
                                                             ) -> None:
    assert check_name(name) == name and check_agent_id(name) == name and check_pattern(name + "*") == name + "*"
    owner, _ = pair
    r = owner.remember("x", scope=name)
    assert owner.get(r.id).scope == name


@pytest.mark.parametrize(("name", "scripts"), [
    ("\u6771\u4eac\u30bf\u30efabc\u0434", "CYRILLIC and HAN and KANA and LATIN"),  # one script past the mix
    ("\ud55c\u30bf", "HANGUL and KANA"),  # Korean and Japanese letters are no allowed mix
])
def test_a_word_past_an_allowed_mix_is_refused(name: str, scripts: str, pair: tuple[MnemoClient, MnemoClient]
                                              ) -> None:
    owner, _ = pair
    why = f"mixes letters of the {scripts} scripts in one word, which can look alike"
    refused(owner, lambda: owner.remember("x", scope=name), f"scope {name!r} {why}")
    refused(owner, lambda: owner.grant(name, "team:a", ["read"]), f"principal {name!r} {why}")


# -- spacing: the same rule for every name, ASCII or not ---------------------------------------------------


@pytest.mark.parametrize(("name", "why"), [
    (" caf\u00e9", "begins or ends with a space"),
    ("caf\u00e9 ", "begins or ends with a space"),
    ("ca  f\u00e9", "holds two spaces in a row"),
    ("\u6771 ", "begins or ends with a space"),
])
def test_a_name_that_is_not_ascii_obeys_the_spacing_rule(name: str, why: str,
                                                        pair: tuple[MnemoClient, MnemoClient]) -> None:
    owner, _ = pair
    for check, what in ((check_name, "scope"), (check_agent_id, "agent_id")):
        with pytest.raises(InvalidInput) as exc:
            check(name, what)
        assert str(exc.value) == f"{what} {name!r} {why}"
    refused(owner, lambda: owner.remember("x", scope=name), f"scope {name!r} {why}")
    refused(owner, lambda: owner.grant(name, "team:a", ["read"]), f"principal {name!r} {why}")


def test_a_pattern_prefix_that_is_not_ascii_may_end_in_a_space() -> None:
    assert check_pattern("caf\u00e9 *") == "caf\u00e9 *"
    with pytest.raises(InvalidInput) as exc:
        check_pattern(" caf\u00e9*")
    assert str(exc.value) == "scope pattern ' caf\u00e9*': its prefix begins or ends with a space"


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
