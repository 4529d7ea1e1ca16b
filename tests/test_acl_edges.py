"""The edges of the name rule and of the permission check, end to end on both backends: a word may mix
exactly the scripts Japanese (or Korean, Chinese) is written in and no others; the spacing rule holds for
names that are not ASCII; and grants and revokes made inside a transaction bind the permission checks
that follow, inside it and after it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mnemo import MnemoClient
from mnemo.acl import check_agent_id, check_name, check_pattern
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
