"""What an agent without admin on `*` learns about the rest of the database: from stats(), head,
verify() and verify_scopes(), nothing that changes when someone else writes in a scope it cannot read."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers.backends import stored

from mnemo import MnemoClient, ScopeReport
from mnemo.errors import PermissionDenied

Agents = tuple[MnemoClient, MnemoClient, MnemoClient]
GLOBAL = ("entries", "head_seq", "head_hash", "log_bytes")


@pytest.fixture
def agents(db: str) -> Iterator[Agents]:
    with MnemoClient(db, "owner", durability="none") as owner, \
            MnemoClient(db, "alice", durability="none") as alice, \
            MnemoClient(db, "bob", durability="none") as bob:
        yield owner, alice, bob


def test_stats_of_an_agent_without_grants_do_not_move_when_others_write(agents: Agents) -> None:
    owner, alice, bob = agents
    bob.remember("bob's own", tags=["b"])
    before = bob.stats()
    assert all(before[k] is None for k in GLOBAL)
    assert (before["records"], before["versions"], before["tags"]) == (1, 1, 1)
    # the attack: does anything in bob's figures follow the size of alice's secret?
    for size in (1, 2, 1000, 1001):
        secret = alice.remember("s" * size, tags=["secret"], metadata={"n": size})
        alice.update(secret.id, content="t" * size)
        assert bob.stats() == before, f"bob's stats moved with a secret of {size} bytes"
        alice.forget(secret.id)
        assert bob.stats() == before
    owner.grant("alice", "team:x", ["read"])
    owner.remember("team", scope="team:x")
    alice.checkpoint()
    assert bob.stats() == before


def test_the_global_figures_are_for_admins_on_everything(agents: Agents) -> None:
    owner, alice, bob = agents
    alice.remember("a")
    full = owner.stats()
    assert full["entries"] == 2 and full["head_seq"] == 1 and len(full["head_hash"]) == 64
    assert full["log_bytes"] > 0 and full["records"] == 1
    owner.grant("alice", "agent:*", ["admin"])  # admin on a wide pattern is not admin on everything
    assert all(alice.stats()[k] is None for k in GLOBAL)
    owner.grant("bob", "*", ["admin"])
    bob_view = bob.stats()
    assert {k: bob_view[k] for k in GLOBAL} == {k: v for k, v in owner.stats().items() if k in GLOBAL}


def test_head_and_verify_need_admin_on_everything(agents: Agents, db: str) -> None:
    owner, alice, bob = agents
    alice.remember("a")
    owner.grant("alice", "agent:*", ["admin", "read"])
    before = stored(db)
    for agent in (alice, bob):
        who = agent.agent_id
        with pytest.raises(PermissionDenied, match=rf"^{who} may not see the chain's head: it needs admin on \*$"):
            _ = agent.head
        with pytest.raises(PermissionDenied, match=rf"^{who} may not verify the chain: it needs admin on \*$"):
            agent.verify()
        with pytest.raises(PermissionDenied):
            agent.verify(expect_head=(0, "00" * 32))  # nor probe a guessed head through it
    assert stored(db) == before
    seq, head_hash = owner.head
    report = owner.verify(expect_head=(seq, head_hash))
    assert report.ok and report.head_seq == seq
    owner.grant("bob", "*", ["admin"])
    assert bob.head == owner.head and bob.verify().ok


def test_verify_scopes_reports_nothing_that_moves_with_what_others_write(agents: Agents) -> None:
    owner, alice, bob = agents
    mine = bob.remember("bob's own")
    bob.update(mine.id, content="bob's own, again")
    before = bob.verify_scopes(["agent:bob"])
    assert before == ScopeReport(ok=True, scopes=("agent:bob",), records=1, versions=2)
    for size in (1, 2, 1000, 1001):  # the attack: does the report follow the size of alice's secret?
        secret = alice.remember("s" * size, tags=["secret"])
        alice.update(secret.id, content="t" * size)
        assert bob.verify_scopes("agent:bob") == before, f"bob's report moved with a secret of {size} bytes"
        alice.forget(secret.id)
        assert bob.verify_scopes("agent:bob") == before
    owner.grant("alice", "team:x", ["read", "write"])
    alice.remember("team", scope="team:x")
    assert bob.verify_scopes("agent:bob") == before
    with pytest.raises(PermissionDenied, match=r"^bob may not read in scope team:x$"):
        bob.verify_scopes(["agent:bob", "team:x"])
    assert alice.verify_scopes(["team:x"]) == ScopeReport(ok=True, scopes=("team:x",), records=1, versions=1)


def test_what_remains_visible_is_a_records_chain_position(agents: Agents) -> None:
    """As the README says: an agent that writes learns its entry's seq, so how many entries came
    before it; no figure tells it their scopes or sizes."""
    _owner, alice, bob = agents
    first = bob.remember("one")
    for _ in range(3):
        alice.remember("secret")
    second = bob.remember("two")
    assert second.seq - first.seq == 4
    assert [r.seq for r in bob.list_records()] == [first.seq, second.seq]
