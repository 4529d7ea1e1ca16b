"""Names are never patterns. An agent id, a principal or an exact scope holding `*` (or anything else
that could be read as another name) is refused at every entry of the library, with a clear error and
the database untouched; a home scope is always exact; and the ACL never reads a principal or a home
scope as a pattern, even from a hand-made log. On both backends (the hand-made log on the file's).
At the rule's edges: a word may mix exactly the scripts Japanese (or Korean, Chinese) is written in and
no others, and the spacing rule holds for names that are not ASCII."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.acl import refused_exactly
from helpers.backends import is_empty, onto, stored
from helpers.logs import LogBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemo import MnemoClient, RecordUnavailable
from mnemo.acl import MAX_AGENT_ID_CHARS, MAX_NAME_CHARS, Acl, check_agent_id, check_name, check_pattern
from mnemo.errors import InvalidInput, PermissionDenied
from mnemo.tools import MnemoMemoryToolServer

# (name, why it is refused): each is refused as an agent id, a principal and an exact scope.
BAD_NAMES: list[tuple[Any, str]] = [
    ("*", "`*`"),
    ("al*", "`*`"),
    ("agent:*", "`*`"),
    ("*lice", "`*`"),
    ("a*b", "`*`"),
    ("", "non-empty string"),
    (" ", "space"),
    ("   ", "space"),
    (" alice", "begins or ends with a space"),
    ("alice ", "begins or ends with a space"),
    ("al  ice", "two spaces"),
    ("al\tice", "control character U+0009"),
    ("alice\n", "control character U+000A"),
    ("al\x00ice", "control character U+0000"),
    ("al\x7fice", "control character U+007F"),
    ("al\u200bice", "U+200B ZERO WIDTH SPACE"),
    ("al\u200dice", "U+200D ZERO WIDTH JOINER"),
    ("\u202eecila", "U+202E RIGHT-TO-LEFT OVERRIDE"),
    ("\ufeffalice", "U+FEFF ZERO WIDTH NO-BREAK SPACE"),
    ("al\u00adice", "U+00AD SOFT HYPHEN"),
    ("al\u00a0ice", "U+00A0 NO-BREAK SPACE"),
    ("al\u3000ice", "U+3000 IDEOGRAPHIC SPACE"),
    ("al\u2028ice", "U+2028 LINE SEPARATOR"),
    ("\u3164", "U+3164 HANGUL FILLER"),
    ("alice\ufe0f", "U+FE0F VARIATION SELECTOR-16"),
    ("al\u034fice", "U+034F COMBINING GRAPHEME JOINER"),
    ("\u2800", "U+2800 BRAILLE PATTERN BLANK"),
    ("al\ud800ice", "U+D800"),
    ("al\ue000ice", "U+E000"),
    ("al\u0378ice", "U+0378"),
    ("al\u2217", "U+2217 ASTERISK OPERATOR"),
    ("al\u204e", "U+204E LOW ASTERISK"),
    ("al\u2731", "U+2731 HEAVY ASTERISK"),
    ("al\uff0a", "U+FF0A FULLWIDTH ASTERISK"),
    ("\uff41lice", "normal form NFKC"),  # FULLWIDTH LATIN SMALL LETTER A
    ("caf\u0065\u0301", "normal form NFKC"),  # e + COMBINING ACUTE, not é
    ("\ufb01le", "normal form NFKC"),  # the ligature fi
    ("alic\u0435", "CYRILLIC and LATIN"),  # a Cyrillic е at the end
    ("\u0430lice", "CYRILLIC and LATIN"),
    ("p\u0430ypal-2", "CYRILLIC and LATIN"),
    ("\u03bfk", "GREEK and LATIN"),  # a Greek omicron
    (5, "non-empty string"),
    (None, "non-empty string"),
    (b"alice", "non-empty string"),
    (["alice"], "non-empty string"),
]
GOOD_NAMES = [
    "alice", "agent-1", "a b", "O'Brien", "team:research/2025", "café", "Zoë", "Дмитрий", "ΑΒΓ",
    "東京タワー", "서울", "agent:東京", "team:Дмитрий", "北京abc", "agent_x.y@z", "x" * MAX_AGENT_ID_CHARS,
]
BAD_PATTERNS: list[tuple[Any, str]] = [
    ("a*b*", "only have `*` at its end"),
    ("**", "only have `*` at its end"),
    ("*a*", "only have `*` at its end"),
    (" *", "begins or ends with a space"),
    ("team  *", "two spaces"),
    ("\u200b*", "U+200B"),
    ("\uff41*", "normal form NFKC"),
    ("te\u0430m:*", "CYRILLIC and LATIN"),
    ("team:\u2217", "ASTERISK OPERATOR"),
    ("team:\uff0a", "FULLWIDTH ASTERISK"),
    ("x" * MAX_NAME_CHARS + "*", "257 characters"),
    ("x" * (MAX_NAME_CHARS + 1), "257 characters"),
    (" alice", "begins or ends with a space"),
    ("", "non-empty string"),
    (7, "non-empty string"),
]
GOOD_PATTERNS = ["*", "team:*", "agent:*", "team *", "team:a", "x" * (MAX_NAME_CHARS - 1) + "*", "x" * MAX_NAME_CHARS]


@pytest.fixture
def names_db(db: str) -> Iterator[tuple[str, MnemoClient, MnemoClient]]:
    path = db
    with MnemoClient(path, "owner", durability="none") as owner, MnemoClient(path, "me", durability="none") as me:
        owner.remember("owner's", scope="team:a")
        me.remember("mine")
        yield path, owner, me


def refused(db: str, call: Callable[[], object], *words: str) -> InvalidInput:
    """The call raises InvalidInput naming every word, and no file (no table) of the database changes."""
    before = stored(db)
    with pytest.raises(InvalidInput) as exc:
        call()
    for word in words:
        assert word in str(exc.value), f"{word!r} not in {exc.value}"
    assert stored(db) == before, "a refused call changed the database"
    return exc.value


# -- the rule itself, both sides of every limit ----------------------------------------------------------


@pytest.mark.parametrize(("name", "why"), BAD_NAMES, ids=repr)
def test_a_bad_name_is_refused_with_the_reason(name: Any, why: str) -> None:
    for check in (check_name, check_agent_id):
        with pytest.raises(InvalidInput, match="^what ") as exc:
            check(name, "what")
        assert why in str(exc.value)


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_a_good_name_passes(name: str) -> None:
    assert check_name(name) == name and check_agent_id(name) == name and check_pattern(name) == name
    assert check_name("agent:" + name) == "agent:" + name  # its home scope is a name too


def test_the_length_limits_on_both_sides() -> None:
    assert MAX_NAME_CHARS == 256 and MAX_AGENT_ID_CHARS == 250
    check_name("s" * 256)
    with pytest.raises(InvalidInput, match="is 257 characters, over the limit of 256"):
        check_name("s" * 257)
    check_agent_id("a" * 250)
    with pytest.raises(InvalidInput, match="is 251 characters, over the limit of 250"):
        check_agent_id("a" * 251)
    check_pattern("p" * 255 + "*")
    with pytest.raises(InvalidInput, match="is 257 characters, over the limit of 256"):
        check_pattern("p" * 256 + "*")
    check_name("é" * 256)  # characters, not bytes
    check_name("a b")  # one space inside is fine; two, or one at either end, are not
    check_pattern("team *")  # a pattern's prefix may end in a space: it is the start of a name


@pytest.mark.parametrize(("pattern", "why"), BAD_PATTERNS, ids=repr)
def test_a_bad_pattern_is_refused(pattern: Any, why: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        check_pattern(pattern)
    assert why in str(exc.value)


@pytest.mark.parametrize("pattern", GOOD_PATTERNS)
def test_a_good_pattern_passes(pattern: str) -> None:
    assert check_pattern(pattern) == pattern


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20))
def test_an_accepted_name_is_exact_and_its_home_is_a_name(name: str) -> None:
    """Whatever text is offered: an accepted agent id holds no `*` and no edge spaces, and in an ACL
    with no grants it reaches its home scope and nothing else, however the scope asked about starts."""
    try:
        check_agent_id(name)
    except InvalidInput:
        return
    assert "*" not in name and name == name.strip() and "  " not in name
    check_name("agent:" + name)
    acl = Acl("\x00owner")  # an owner no accepted name can be
    assert acl.allows(name, "read", "agent:" + name)
    for scope in ("agent:" + name + "x", "agent:" + name[:-1], "agent:", "*", "agent:*", "owner"):
        assert not acl.allows(name, "read", scope)
    assert not acl.may_administer(name, "agent:" + name + "*")


# -- every entry of the library refuses a bad name, and changes nothing -------------------------------


@pytest.mark.parametrize(("name", "why"), BAD_NAMES, ids=repr)
def test_every_entry_refuses_a_bad_name(names_db: tuple[str, MnemoClient, MnemoClient], name: Any, why: str) -> None:
    path, owner, me = names_db
    refused(path, lambda: MnemoClient(path, name, durability="none"), "agent_id", why)
    for client in (owner, me):  # the owner holds admin on *: its grants are refused as surely
        refused(path, lambda c=client: c.grant(name, "agent:me", ["read"]), "principal", why)
        refused(path, lambda c=client: c.revoke(name, "agent:me"), "principal", why)
        refused(path, lambda c=client: c.check_permission("read", name), "scope", why)
        if name is None:
            continue  # (where None means the default: this agent, its home scope, no filter)
        refused(path, lambda c=client: c.permissions(name), "agent_id", why)
        refused(path, lambda c=client: c.remember("x", scope=name), "scope", why)
        refused(path, lambda c=client: MnemoMemoryToolServer(c, scope=name), "scope", why)
        if not (isinstance(name, str) and name.endswith("*") and "*" not in name[:-1]):
            # (a trailing `*` makes a valid pattern of a valid prefix: grants and filters take those)
            refused(path, lambda c=client: c.grant("bob", name, ["read"]), "scope", why)
            refused(path, lambda c=client: c.revoke("bob", name), "scope", why)
            refused(path, lambda c=client: c.query(scope=name), "scope", why)
            refused(path, lambda c=client: c.list_records(scope=name), "scope", why)
            refused(path, lambda c=client: c.forget_where(scope=name), "scope", why)


def test_a_new_database_is_not_created_for_a_bad_agent_id(db: str) -> None:
    for name in ("*", "al*", " owner", "own\u0435r"):
        with pytest.raises(InvalidInput):
            MnemoClient(db, name)
        assert is_empty(db)


@pytest.mark.parametrize(("pattern", "why"), BAD_PATTERNS, ids=repr)
def test_grants_and_filters_refuse_a_bad_pattern(
    names_db: tuple[str, MnemoClient, MnemoClient], pattern: Any, why: str
) -> None:
    path, owner, _me = names_db
    refused(path, lambda: owner.grant("bob", pattern, ["read"]), "scope", why)
    refused(path, lambda: owner.revoke("bob", pattern), "scope", why)
    refused(path, lambda: owner.query(scope=pattern), "scope", why)
    refused(path, lambda: owner.forget_where(scope=pattern), "scope", why)


def test_names_at_their_limits_work_end_to_end(db: str) -> None:
    path = db
    longest = "a" * MAX_AGENT_ID_CHARS
    with MnemoClient(path, "owner", durability="none") as owner, MnemoClient(path, longest, durability="none") as c:
        assert len(c.home_scope) == MAX_NAME_CHARS
        rec = c.remember("at the limit", scope=c.home_scope)  # the home scope, named explicitly
        c.grant("bob", c.home_scope, ["read"])  # a grant on it
        assert owner.permissions("bob") == {"agent:bob": ("admin", "forget", "read", "write"),
                                            c.home_scope: ("read",)}
        scope = "s" * MAX_NAME_CHARS
        owner.remember("long scope", scope=scope)
        owner.grant(longest, "s" * (MAX_NAME_CHARS - 1) + "*", ["read"])
        assert [r.content for r in c.query(scope="s*")] == ["long scope"]
        assert c.get(rec.id).content == "at the limit"
        with pytest.raises(InvalidInput, match="251 characters"):
            MnemoClient(path, longest + "a")


# -- the attack: an agent named like a pattern ------------------------------------------------------------


def test_an_agent_named_like_a_pattern_cannot_open_let_alone_read_others(db: str) -> None:
    path = db
    with MnemoClient(path, "owner", durability="none") as owner, \
            MnemoClient(path, "alice", durability="none") as alice:
        secret = alice.remember("alice's secret")
        owner.remember("owner's", scope="team:a")
        before = stored(db)
        for attacker in ("*", "al*", "a*", "agent:*"):
            with pytest.raises(InvalidInput, match="pattern character"):
                MnemoClient(path, attacker, durability="none")
        assert stored(db) == before
        assert alice.get(secret.id).content == "alice's secret"


def test_admin_on_a_home_scope_never_yields_a_pattern(names_db: tuple[str, MnemoClient, MnemoClient]) -> None:
    path, owner, me = names_db
    me.grant("bob", "agent:me", ["read"])  # its own home, exactly: allowed
    for pattern in ("agent:me*", "agent:m*", "agent:*", "*"):
        before = stored(path)
        with pytest.raises(PermissionDenied, match=r"^me may not admin in scope "):
            me.grant("me", pattern, ["read"])
        with pytest.raises(PermissionDenied):
            me.grant("bob", pattern, ["admin"])
        assert stored(path) == before
    assert me.permissions() == {"agent:me": ("admin", "forget", "read", "write")}
    # ... unless it holds admin on a pattern covering it
    owner.grant("me", "agent:me*", ["admin"])
    me.grant("bob", "agent:me*", ["read"])
    assert owner.permissions("bob")["agent:me*"] == ("read",)
    with pytest.raises(PermissionDenied):
        me.grant("bob", "agent:m*", ["read"])


# -- the ACL reads names literally, even from a hand-made log ---------------------------------------------


def test_the_acl_never_treats_a_principal_or_home_scope_as_a_pattern() -> None:
    acl = Acl("owner")
    acl.grant("al*", "agent:al*", ["admin", "read"])  # as a hand-made log could hold
    acl.grant("*", "team:*", ["read"])
    for agent in ("alice", "al", "bob"):  # a principal is one agent, never those it matches
        assert not acl.allows(agent, "read", "agent:alice" if agent != "alice" else "team:x")
        assert not acl.allows(agent, "read", "agent:al*")
        assert not acl.may_administer(agent, "agent:al*")
    assert acl.readable_filter("al*") == (False, set(), ("agent:al",))  # its grant, not a home
    # an id with pattern syntax has no home scope at all (so none can be a pattern)
    plain = Acl("owner")
    assert not plain.allows("al*", "read", "agent:al*")
    assert not plain.may_administer("al*", "agent:al*")
    assert plain.effective("al*") == {}
    assert plain.readable_filter("al*") == (False, set(), ())
    # an empty owner (no genesis read yet) is nobody
    assert not Acl("").allows("", "read", "team:a")
    assert Acl("").readable_filter("") == (False, set(), ())


def test_a_hand_made_log_with_pattern_names_grants_nothing_to_real_agents(db: str, tmp_path: Path) -> None:
    b = LogBuilder(owner="owner")
    b.put("alice", "r-alice", "alice's secret")
    b.put("al*", "r-star", "in a scope named like a pattern", scope="agent:al*")
    b.grant("al*", "al*", "agent:al*", ["admin", "read"])  # a self-grant no client could write
    b.grant("al*", "alice", "agent:al*", ["read"])
    path = onto(db, b.build().write(tmp_path / "forged.db"))  # on PostgreSQL: copied, entry for entry
    with MnemoClient(path, "alice", durability="none") as alice, MnemoClient(path, "al", durability="none") as al:
        # alice holds a grant on the pattern `agent:al*` (forged or not, a grant is a grant) ...
        assert {r.id for r in alice.list_records()} == {"r-alice", "r-star"}
        # ... but `al`, whose home is `agent:al`, gets nothing from a principal named `al*`
        assert al.list_records() == []
        assert al.permissions() == {"agent:al": ("admin", "forget", "read", "write")}
        for rid in ("r-alice", "r-star"):
            with pytest.raises(RecordUnavailable):
                al.get(rid)
        with pytest.raises(PermissionDenied):
            al.grant("bob", "agent:al*", ["read"])


# -- transactions: grants and revokes inside, and the checks after them ------------------------------------


def test_a_revoke_inside_a_transaction_binds_the_rest_of_it(names_db: tuple[str, MnemoClient, MnemoClient]) -> None:
    path, owner, me = names_db
    owner.grant("me", "team:*", ["admin"])
    before = stored(path)
    with pytest.raises(PermissionDenied, match="me may not admin in scope team:b"), me.transaction():
        me.remember("in team:a", scope="team:a")
        me.revoke("me", "team:*")
        with pytest.raises(PermissionDenied, match="me may not write in scope team:a"):
            me.check_permission("write", "team:a")
        assert me.permissions() == {"agent:me": ("admin", "forget", "read", "write")}
        me.grant("bob", "team:b", ["read"])  # no longer allowed: the whole transaction is undone
    assert stored(path) == before
    assert me.permissions()["team:*"] == ("admin", "forget", "read", "write")
    me.check_permission("write", "team:a")


def test_a_grant_inside_a_transaction_is_seen_by_it_and_undone_with_it(
    names_db: tuple[str, MnemoClient, MnemoClient],
) -> None:
    path, owner, me = names_db
    before = stored(path)
    with pytest.raises(RuntimeError), owner.transaction():
        owner.grant("me", "team:*", ["admin"])
        assert owner.permissions("me")["team:*"] == ("admin", "forget", "read", "write")
        raise RuntimeError("abandon")
    assert stored(path) == before
    assert "team:*" not in owner.permissions("me")
    with pytest.raises(PermissionDenied):
        me.check_permission("read", "team:a")
    with owner.transaction():
        owner.grant("me", "team:*", ["read"])
        owner.revoke("me", "team:*", ["read"])
        owner.grant("me", "team:a", ["read"])
    assert me.permissions() == {"agent:me": ("admin", "forget", "read", "write"), "team:a": ("read",)}
    me.check_permission("read", "team:a")
    with pytest.raises(PermissionDenied):
        me.check_permission("read", "team:b")


def test_bad_names_inside_a_transaction_are_refused_like_outside(
    names_db: tuple[str, MnemoClient, MnemoClient],
) -> None:
    path, owner, me = names_db
    before = stored(path)
    with pytest.raises(InvalidInput), me.transaction():
        me.remember("staged")
        me.grant("al*", "agent:me", ["read"])
    assert stored(path) == before
    with pytest.raises(PermissionDenied), me.transaction():
        me.grant("bob", "agent:me", ["read"])
        me.grant("me", "agent:me*", ["read"])  # its home, widened to a pattern: refused in here too
    assert stored(path) == before
    with me.transaction():  # refusals caught inside stage nothing; the rest commits
        for call in (
            lambda: me.grant("*", "agent:me", ["read"]),
            lambda: me.grant("bob", "agent:m*e", ["read"]),
            lambda: me.check_permission("read", "agent:*"),
            lambda: me.remember("x", scope="agent:me*"),
        ):
            with pytest.raises(InvalidInput):
                call()
        me.grant("bob", "agent:me", ["read"])
    assert owner.permissions("bob") == {"agent:bob": ("admin", "forget", "read", "write"), "agent:me": ("read",)}


def test_a_memory_tool_server_works_in_an_exact_scope(names_db: tuple[str, MnemoClient, MnemoClient]) -> None:
    _path, owner, me = names_db
    assert MnemoMemoryToolServer(me).scope == "agent:me"
    assert MnemoMemoryToolServer(owner, scope="team:a").scope == "team:a"
    for scope in ("team:*", "*", "agent:m*", "team:\u2217", " team:a"):
        with pytest.raises(InvalidInput, match="^scope "):
            MnemoMemoryToolServer(owner, scope=scope)


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
    refused_exactly(owner, lambda: owner.remember("x", scope=name), f"scope {name!r} {why}")
    refused_exactly(owner, lambda: owner.grant(name, "team:a", ["read"]), f"principal {name!r} {why}")


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
    refused_exactly(owner, lambda: owner.remember("x", scope=name), f"scope {name!r} {why}")
    refused_exactly(owner, lambda: owner.grant(name, "team:a", ["read"]), f"principal {name!r} {why}")


def test_a_pattern_prefix_that_is_not_ascii_may_end_in_a_space() -> None:
    assert check_pattern("caf\u00e9 *") == "caf\u00e9 *"
    with pytest.raises(InvalidInput) as exc:
        check_pattern(" caf\u00e9*")
    assert str(exc.value) == "scope pattern ' caf\u00e9*': its prefix begins or ends with a space"
