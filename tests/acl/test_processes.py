"""Two agents in two processes on one db: each sees only its own memories; a grant made in one process
is honoured by the other on its next call, without reopening, and so is a revoke. On both backends."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.backends import snapshot
from helpers.procs import subprocess_env

from mnemo import MnemoClient, PermissionDenied

OWNER = "root"

# One client for the life of the process; commands arrive as JSON lines, answers go back the same way.
AGENT_LOOP = r"""
import json, sys
from mnemo import MnemoClient, MnemoError

client = MnemoClient(sys.argv[1], sys.argv[2], durability="fsync", lock_timeout=30.0)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    op, args = cmd["op"], cmd.get("args", {})
    try:
        if op == "remember":
            out = client.remember(**args).id
        elif op == "get":
            out = client.get(**args).content
        elif op == "query":
            out = sorted(r.content for r in client.query(**args))
        elif op == "update":
            out = client.update(**args).version
        elif op == "forget":
            out = client.forget(**args)
        elif op in ("grant", "revoke"):
            out = getattr(client, op)(**args)
        elif op == "permissions":
            out = {k: list(v) for k, v in client.permissions().items()}
        else:
            raise SystemExit(f"unknown op {op}")
        reply = {"ok": out}
    except MnemoError as exc:
        reply = {"error": type(exc).__name__, "mro": [c.__name__ for c in type(exc).__mro__]}
    print(json.dumps(reply), flush=True)
client.close()
"""


class Agent:
    """A client living in its own process, driven one command at a time."""

    def __init__(self, db: str, agent_id: str) -> None:
        self.agent_id = agent_id
        self.proc = subprocess.Popen(
            [sys.executable, "-c", AGENT_LOOP, str(db), agent_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
        )
        assert self._read() == {"ready": True}

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            assert self.proc.stderr is not None
            raise AssertionError(f"{self.agent_id} died: {self.proc.stderr.read()}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def call(self, op: str, **args: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        if "error" in reply:
            raise AssertionError(f"{self.agent_id}: {op} raised {reply['error']}")
        return reply["ok"]

    def fails(self, op: str, **args: Any) -> list[str]:
        """Run a command that must fail; return the error's class names (most specific first)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        assert "error" in reply, f"{self.agent_id}: {op} {args} succeeded: {reply}"
        mro: list[str] = reply["mro"]
        return mro

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0


@pytest.fixture
def agents(db: str) -> Iterator[tuple[str, Agent, Agent]]:
    MnemoClient(db, OWNER, durability="none").close()  # root owns the db; alice and bob do not
    alice = Agent(db, "alice")
    try:
        bob = Agent(db, "bob")
    except BaseException:
        alice.proc.kill()
        raise
    try:
        yield db, alice, bob
        alice.close()
        bob.close()
    finally:
        for a in (alice, bob):
            if a.proc.poll() is None:
                a.proc.kill()
                a.proc.wait()


def test_each_agent_sees_only_its_own(agents: tuple[str, Agent, Agent]) -> None:
    _db, alice, bob = agents
    a_id = alice.call("remember", content="alice-1", tags=["t"])
    b_id = bob.call("remember", content="bob-1", tags=["t"])
    assert alice.call("query") == ["alice-1"]
    assert bob.call("query", tags=["t"]) == ["bob-1"]
    assert alice.call("get", rec_id=a_id) == "alice-1"
    for op, args in (("get", {"rec_id": a_id}), ("update", {"rec_id": a_id, "content": "x"}),
                     ("forget", {"ids": a_id})):
        mro = bob.fails(op, **args)
        assert mro[0] == "RecordUnavailable" and "NotFound" in mro and "PermissionDenied" in mro
    assert alice.fails("get", rec_id=b_id)[0] == "RecordUnavailable"
    assert bob.fails("remember", content="x", scope="agent:alice")[0] == "PermissionDenied"
    assert alice.call("query") == ["alice-1"]


def test_grant_and_revoke_take_effect_in_the_other_process(agents: tuple[str, Agent, Agent]) -> None:
    _db, alice, bob = agents
    a_id = alice.call("remember", content="alice-1")
    bob.call("remember", content="bob-1")
    assert bob.call("query") == ["bob-1"]

    alice.call("grant", principal="bob", scope="agent:alice", perms=["read"])
    assert bob.call("query") == ["alice-1", "bob-1"]  # the next call, no reopen
    assert bob.call("get", rec_id=a_id) == "alice-1"
    assert bob.call("permissions")["agent:alice"] == ["read"]
    assert bob.fails("update", rec_id=a_id, content="edited")[0] == "PermissionDenied"

    alice.call("remember", content="alice-2")  # written after the grant: visible too
    assert bob.call("query") == ["alice-1", "alice-2", "bob-1"]

    alice.call("grant", principal="bob", scope="agent:alice", perms=["write"])
    assert bob.call("update", rec_id=a_id, content="alice-1 (edited by bob)") == 2
    assert alice.call("get", rec_id=a_id) == "alice-1 (edited by bob)"

    alice.call("revoke", principal="bob", scope="agent:alice")
    assert bob.call("query") == ["bob-1"]
    assert bob.fails("get", rec_id=a_id)[0] == "RecordUnavailable"
    assert "agent:alice" not in bob.call("permissions")
    assert alice.call("query") == ["alice-1 (edited by bob)", "alice-2"]


def test_owner_grants_a_team_scope_across_processes(agents: tuple[str, Agent, Agent]) -> None:
    db, alice, bob = agents
    with MnemoClient(db, OWNER, durability="none") as root:  # a third process-level client, open throughout
        assert alice.fails("remember", content="team note", scope="team:a")[0] == "PermissionDenied"
        root.grant("alice", "team:a", ["read", "write"])
        t_id = alice.call("remember", content="team note", scope="team:a")
        assert bob.call("query", scope="team:*") == []
        assert bob.fails("get", rec_id=t_id)[0] == "RecordUnavailable"

        root.grant("bob", "team:*", ["read"])
        assert bob.call("query", scope="team:*") == ["team note"]
        assert bob.call("get", rec_id=t_id) == "team note"
        assert bob.fails("forget", ids=t_id)[0] == "PermissionDenied"

        root.revoke("bob", "team:*", ["read"])
        assert bob.call("query") == []
        assert bob.fails("get", rec_id=t_id)[0] == "RecordUnavailable"

        root.revoke("alice", "team:a")
        assert alice.call("query") == []
        assert alice.fails("remember", content="again", scope="team:a")[0] == "PermissionDenied"
        assert [r.content for r in root.query(scope="team:a")] == ["team note"]


def test_a_grant_by_another_client_is_honoured_by_the_next_remember(db: str) -> None:
    """A new record's write may be built on the last head its client saw (PostgreSQL's blind appends):
    a refusal stands only if the ACL as of now refuses too, and a revoke binds at once as well."""
    with MnemoClient(db, OWNER, durability="none") as root, MnemoClient(db, "alice", durability="none") as alice:
        alice.remember("seen the head")
        with pytest.raises(PermissionDenied):
            alice.remember("too early", scope="team:a")
        root.grant("alice", "team:a", ["write"])
        assert alice.remember("team note", scope="team:a").scope == "team:a"
        root.revoke("alice", "team:a")
        before = snapshot(db)
        with pytest.raises(PermissionDenied, match="^alice may not write in scope team:a$"):
            alice.remember("revoked", scope="team:a")
        assert snapshot(db) == before
        assert [r.content for r in root.query(scope="team:a")] == ["team note"]
