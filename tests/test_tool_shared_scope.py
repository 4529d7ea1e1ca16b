"""Existence is checked over the whole scope, whatever the caller may read (docs/MEMORY_TOOL.md §6, §8): an
agent that may write but not read a shared scope cannot put a second file at a path, nor a file under a
file; and the two client methods that let a writer see that (`scope_has`, `scope_usage`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helpers.backends import payload_reader, snapshot

from mnemo import MnemoClient
from mnemo.errors import InvalidInput, PermissionDenied
from mnemo.tools import CommandResult, MnemoMemoryToolServer

TEAM = "team:research"


@pytest.fixture
def owner(db: str) -> Iterator[MnemoClient]:
    with MnemoClient(db, "owner", durability="none") as c:
        yield c


def listing(server: MnemoMemoryToolServer) -> list[str]:
    return server.execute({"command": "view", "path": "/memories"}).text.split("\n")[1:]


def test_a_write_only_agent_cannot_create_beside_what_it_cannot_see(owner: MnemoClient, db: str) -> None:
    team = MnemoMemoryToolServer(owner, scope=TEAM)
    for path, text in (("/memories/plan.md", "the owner's plan"), ("/memories/d/x.md", "x")):
        assert not team.execute({"command": "create", "path": path, "file_text": text}).is_error
    owner.grant("agent-2", TEAM, ["write"])
    with MnemoClient(db, "agent-2", durability="none") as c2:
        writer = MnemoMemoryToolServer(c2, scope=TEAM, create_overwrites=True)
        head, size = owner.head, snapshot(db)
        for tool_input, text in [
            ({"command": "create", "path": "/memories/plan.md", "file_text": "mine"},
             "Error: File /memories/plan.md already exists"),
            ({"command": "create", "path": "/memories//plan.md/", "file_text": "mine"},
             "Error: File /memories//plan.md/ already exists"),
            ({"command": "create", "path": "/memories/d", "file_text": "mine"},
             "Error: File /memories/d already exists"),
            ({"command": "create", "path": "/memories/plan.md/sub", "file_text": "mine"},
             "Error: Cannot create /memories/plan.md/sub: /memories/plan.md is a file"),
            ({"command": "rename", "old_path": "/memories/mine.md", "new_path": "/memories/plan.md"},
             "Error: The destination /memories/plan.md already exists"),
            ({"command": "rename", "old_path": "/memories/mine.md", "new_path": "/memories/d"},
             "Error: The destination /memories/d already exists"),
            # what it cannot read, it cannot edit or view: as before, it does not exist for it
            ({"command": "str_replace", "path": "/memories/plan.md", "old_str": "plan", "new_str": "x"},
             "Error: The path /memories/plan.md does not exist. Please provide a valid path."),
            ({"command": "view", "path": "/memories"},
             f"Error: Permission denied: agent-2 may not read in scope {TEAM}"),
        ]:
            assert writer.execute(tool_input) == CommandResult(text, True), tool_input
        assert (owner.head, snapshot(db)) == (head, size)
        # a new path it may create
        assert writer.execute({"command": "create", "path": "/memories/new.md", "file_text": "n"}).is_error is False
    assert listing(team) == [
        "18B\t/memories",
        "1B\t/memories/d/",
        "1B\t/memories/d/x.md",
        "1B\t/memories/new.md",
        "16B\t/memories/plan.md",  # one file, the owner's
    ]
    assert [r.content for r in owner.query(tags=("path:/memories/plan.md",), scope=TEAM)] == ["the owner's plan"]


def test_a_rename_cannot_move_under_a_file_it_cannot_see(owner: MnemoClient, db: str) -> None:
    """An agent that reads its own scope but only writes a shared one still meets the shared files."""
    team = MnemoMemoryToolServer(owner, scope=TEAM)
    assert not team.execute({"command": "create", "path": "/memories/f", "file_text": "file"}).is_error
    owner.grant("agent-2", TEAM, ["write"])
    with MnemoClient(db, "agent-2", durability="none") as c2:
        writer = MnemoMemoryToolServer(c2, scope=TEAM)
        assert writer.execute({"command": "create", "path": "/memories/f/g", "file_text": "x"}) == CommandResult(
            "Error: Cannot create /memories/f/g: /memories/f is a file", True
        )


# -- the client methods ---------------------------------------------------------------------------------


def test_scope_has_and_scope_usage(owner: MnemoClient, db: str) -> None:
    owner.remember("abc", tags=("memorytool", "path:/memories/a"), scope=TEAM)
    rec = owner.remember("de", tags=("memorytool", "path:/memories/d/e"), scope=TEAM)
    owner.update(rec.id, content="defg")
    owner.remember("other scope", tags=("memorytool", "path:/memories/a"), scope="team:other")
    owner.grant("agent-2", TEAM, ["write"])
    owner.grant("agent-3", TEAM, ["read"])
    with MnemoClient(db, "agent-2", durability="none") as c2, MnemoClient(db, "agent-3", durability="none") as c3:
        assert c2.scope_has(TEAM, ("path:/memories/a", "memorytool"))
        assert c2.scope_has(TEAM, ("memorytool",), tag_prefix="path:/memories/d/")
        assert not c2.scope_has(TEAM, ("memorytool",), tag_prefix="path:/memories/a/")
        assert not c2.scope_has(TEAM, ("path:/memories/a", "missing"))
        usage = c2.scope_usage(TEAM, "memorytool")
        assert (usage.records, usage.latest_bytes, usage.version_bytes) == (2, 7, 9)
        for call in (lambda c: c.scope_has(TEAM, ("memorytool",)), lambda c: c.scope_usage(TEAM, "memorytool")):
            with pytest.raises(PermissionDenied, match="agent-3 may not write in scope team:research"):
                call(c3)
        with pytest.raises(PermissionDenied, match="agent-2 may not write in scope team:other"):
            c2.scope_usage("team:other", "memorytool")
        for bad in [
            lambda: c2.scope_has(TEAM),
            lambda: c2.scope_has(TEAM, "memorytool"),
            lambda: c2.scope_has("team:*", ("memorytool",)),
            lambda: c2.scope_has(TEAM, ("memorytool",), tag_prefix=5),  # type: ignore[arg-type]
            lambda: c2.scope_usage("", "memorytool"),
        ]:
            with pytest.raises(InvalidInput):
                bad()


def test_scope_methods_see_their_own_transaction(
    owner: MnemoClient, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = owner.home_scope
    kept = owner.remember("keep", tags=("memorytool", "path:/memories/keep"))
    gone = owner.remember("gone", tags=("memorytool", "path:/memories/gone"))

    def no_content(*args: object, **kwargs: object) -> Any:
        raise AssertionError("read content")

    with owner.transaction():
        owner.remember("staged", tags=("memorytool", "path:/memories/staged"))
        owner.update(kept.id, content="kept longer")
        owner.forget([gone.id])
        monkeypatch.setattr(owner._store, payload_reader(db), no_content)
        assert owner.scope_has(home, ("path:/memories/staged", "memorytool"))
        assert not owner.scope_has(home, ("path:/memories/gone",))
        usage = owner.scope_usage(home, "memorytool")
        assert (usage.records, usage.latest_bytes, usage.version_bytes) == (2, 6 + 11, 6 + 4 + 11)
        monkeypatch.undo()
