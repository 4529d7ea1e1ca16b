"""`MnemoClient.log` (the chain's entries, as `mnemo log` shows them) and `MnemoClient.grants` (every grant
in force): both need admin on `*`, on every backend."""

from __future__ import annotations

import pytest

from mnemo import MnemoClient
from mnemo.errors import InvalidInput, PermissionDenied


def test_log_gives_the_entries_from_since_at_most_limit_of_kind_op(client: MnemoClient) -> None:
    first = client.remember("one")
    second = client.remember("two")
    client.forget([first.id], reason="r")
    entries = client.log()
    assert [(e.seq, e.op) for e in entries] == [(0, "genesis"), (1, "put"), (2, "put"), (3, "forget")]
    assert entries[2].body["id"] == second.id and entries[3].body["ids"] == [first.id]
    assert entries[3].hash.hex() == client.head[1]
    assert [e.seq for e in client.log(since=2)] == [2, 3]
    assert [e.seq for e in client.log(since=1, limit=2)] == [1, 2]
    assert client.log(limit=0) == [] and client.log(since=4) == []
    assert [e.seq for e in client.log(op="put")] == [1, 2]
    assert [e.seq for e in client.log(op="put", limit=1)] == [1]
    assert client.log(op="checkpoint") == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"since": -1}, "since must be a non-negative int, got -1"),
        ({"since": True}, "since must be a non-negative int, got True"),
        ({"since": "0"}, "since must be a non-negative int, got '0'"),
        ({"limit": -1}, "limit must be a non-negative int or None, got -1"),
        ({"limit": 1.5}, "limit must be a non-negative int or None, got 1.5"),
        ({"op": 3}, "op must be a string or None, got 3"),
    ],
)
def test_log_refuses_bad_arguments(client: MnemoClient, kwargs: dict[str, object], message: str) -> None:
    client.remember("x")
    head = client.head
    with pytest.raises(InvalidInput, match=f"^{message}$"):
        client.log(**kwargs)  # type: ignore[arg-type]
    assert client.head == head


def test_log_and_grants_need_admin_on_everything(db: str, client: MnemoClient) -> None:
    client.grant("bob", "team:*", ["read", "write"])
    client.grant("carol", "team:x", ["admin"])
    with MnemoClient(db, "bob", durability="none") as bob, MnemoClient(db, "carol", durability="none") as carol:
        for other in (bob, carol):
            who = other.agent_id
            with pytest.raises(PermissionDenied, match=f"^{who} may not read the chain: it needs admin on \\*$"):
                other.log()
            with pytest.raises(PermissionDenied, match=f"^{who} may not see every grant: it needs admin on \\*$"):
                other.grants()
        client.grant("bob", "*", ["admin"])
        assert [e.op for e in bob.log()][-1] == "grant"
        assert bob.grants() == client.grants()


def test_grants_are_those_in_force(client: MnemoClient) -> None:
    assert client.grants() == {}
    client.grant("bob", "team:*", ["write", "read"])
    client.grant("bob", "agent:x", ["read"])
    client.grant("alice", "team:y", ["forget"])
    client.revoke("bob", "team:*", ["write"])
    assert client.grants() == {
        "alice": {"team:y": ("forget",)},
        "bob": {"agent:x": ("read",), "team:*": ("read",)},
    }
    client.revoke("alice", "team:y")
    assert client.grants() == {"bob": {"agent:x": ("read",), "team:*": ("read",)}}
