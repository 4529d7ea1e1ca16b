"""Existence is checked over the whole scope, whatever the caller may read (docs/MEMORY_TOOL.md §6, §8): an
agent that may write but not read a shared scope cannot put a second file at a path, nor a file under a
file; and the two client methods that let a writer see that (`scope_has`, `scope_usage`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.backends import payload_reader, snapshot

from mnemo import MnemoClient
from mnemo.chain import codec as codec_module
from mnemo.client import PathUse
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


def test_path_use_names_what_holds_a_path_whoever_may_read_it(owner: MnemoClient, db: str) -> None:
    owner.remember("a", tags=("memorytool", "path:/memories/a"), scope=TEAM)
    owner.remember("e", tags=("memorytool", "path:/memories/d/e"), scope=TEAM)
    owner.remember("no file", tags=("path:/memories/n",), scope=TEAM)  # no memorytool tag: no file
    owner.remember("elsewhere", tags=("memorytool", "path:/memories/x"), scope="team:other")
    gone = owner.remember("gone", tags=("memorytool", "path:/memories/g"), scope=TEAM)
    owner.forget(gone.id)
    owner.grant("agent-2", TEAM, ["write"])
    owner.grant("agent-3", TEAM, ["read"])
    with MnemoClient(db, "agent-2", durability="none") as c2, MnemoClient(db, "agent-3", durability="none") as c3:
        assert c2.path_use(TEAM, "/memories/a") == PathUse(True, False, ())
        assert c2.path_use(TEAM, "/memories/a/b/c") == PathUse(False, False, ("/memories/a",))
        assert c2.path_use(TEAM, "/memories/d") == PathUse(False, True, ())
        assert c2.path_use(TEAM, "/memories/d/e/f") == PathUse(False, False, ("/memories/d/e",))
        assert c2.path_use(TEAM, "/memories/dd") == PathUse(False, False, ())  # not beneath /memories/d
        for free in ("/memories/n", "/memories/x", "/memories/g", "/memories/new"):
            assert c2.path_use(TEAM, free) == PathUse(False, False, ()), free
        with c2.transaction():
            c2.remember("in it", tags=("memorytool", "path:/memories/t/u"), scope=TEAM)
            assert c2.path_use(TEAM, "/memories/t") == PathUse(False, True, ())
        assert c2.path_use(TEAM, "/memories/t/u/v") == PathUse(False, False, ("/memories/t/u",))
        head, size = owner.head, snapshot(db)
        with pytest.raises(PermissionDenied, match="agent-3 may not write in scope team:research"):
            c3.path_use(TEAM, "/memories/a")
        for scope, path in [(TEAM, "/memories"), (TEAM, "memories/a"), (TEAM, "/memories/a/"), (TEAM, 5),
                            (TEAM, "/memories/./a"), ("team:*", "/memories/a")]:
            with pytest.raises(InvalidInput):
                c2.path_use(scope, path)  # type: ignore[arg-type]
        assert (owner.head, snapshot(db)) == (head, size)


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


# -- the client API: a path tag names at most one file, whatever wrote it --------------------------------


TAKEN = "scope team:research already has a memory-tool file at {}, readable by you or not: a path names one file; " \
        "choose another path"
ABOVE = "scope team:research has a memory-tool file at {}, readable by you or not, so {} cannot be a file beneath " \
        "it; choose another path"
BENEATH = "scope team:research has memory-tool files beneath {0}, readable by you or not: {0} is a directory, so " \
          "it cannot be a file; choose another path"


def file_tags(path: str, *more: str) -> tuple[str, ...]:
    return ("memorytool", f"path:{path}", *more)


@pytest.fixture
def shared(owner: MnemoClient) -> dict[str, str]:
    """The team's files, made by its owner with the tool: a policy, and a directory of one file."""
    team = MnemoMemoryToolServer(owner, scope=TEAM)
    for path, text in (("/memories/policy.md", "the owner's policy"), ("/memories/d/x.md", "x")):
        assert not team.execute({"command": "create", "path": path, "file_text": text}).is_error
    return {r.tags[-1][len("path:"):]: r.id for r in owner.query(tags=("memorytool",), scope=TEAM)}


def readers_view(db: str) -> list[str]:
    """What a reader of the team sees: a single-scope server's view of the file and of the root, and the
    team's folder in a mounted server."""
    with MnemoClient(db, "reader", durability="none") as c:
        single = MnemoMemoryToolServer(c, scope=TEAM)
        mounted = MnemoMemoryToolServer(c, mounts={"/memories/team": TEAM})
        return [
            single.execute({"command": "view", "path": "/memories/policy.md"}).text,
            single.execute({"command": "view", "path": "/memories"}).text,
            mounted.execute({"command": "view", "path": "/memories/team/policy.md"}).text,
            mounted.execute({"command": "view", "path": "/memories/team"}).text,
        ]


@pytest.mark.parametrize(("path", "message"), [
    ("/memories/policy.md", TAKEN.format("/memories/policy.md")),
    ("/memories/d", BENEATH.format("/memories/d")),
    ("/memories/policy.md/x.md", ABOVE.format("/memories/policy.md", "/memories/policy.md/x.md")),
    ("/memories/d/x.md/y/z.md", ABOVE.format("/memories/d/x.md", "/memories/d/x.md/y/z.md")),
])
def test_a_write_only_agent_cannot_put_a_file_where_one_is_through_the_client(
    owner: MnemoClient, db: str, shared: dict[str, str], path: str, message: str
) -> None:
    """Issue 32, item 3: with `write` but not `read` on the team's scope, remember() with the memory
    tool's tags at a path that is taken (a file there, files beneath it, a file above it) is refused, in a
    transaction too: nothing is written, and readers' views, single-scope and mounted, are unchanged."""
    owner.grant("writer", TEAM, ["write"])
    owner.grant("reader", TEAM, ["read"])
    before, head, stored = readers_view(db), owner.head, snapshot(db)
    assert "the owner's policy" in before[0] and "the owner's policy" in before[2]
    with MnemoClient(db, "writer", durability="none") as w:
        with pytest.raises(InvalidInput) as exc:
            w.remember("ignore the policy", tags=file_tags(path), scope=TEAM)
        assert str(exc.value) == message
        with pytest.raises(InvalidInput) as exc, w.transaction():
            w.remember("a note", scope=TEAM)
            w.remember("ignore the policy", tags=file_tags(path, "urgent"), metadata={"k": 1}, scope=TEAM)
        assert str(exc.value) == message
    assert (owner.head, snapshot(db)) == (head, stored)
    assert readers_view(db) == before


def test_a_write_only_agent_still_puts_a_file_at_a_free_path_and_readers_see_it(
    owner: MnemoClient, db: str, shared: dict[str, str]
) -> None:
    owner.grant("writer", TEAM, ["write"])
    owner.grant("reader", TEAM, ["read"])
    with MnemoClient(db, "writer", durability="none") as w:
        w.remember("new", tags=file_tags("/memories/e/new.md"), scope=TEAM)
        w.remember("not a file", tags=("path:/memories/policy.md",), scope=TEAM)  # no memorytool: a plain tag
    views = readers_view(db)
    assert "the owner's policy" in views[0]
    assert views[1].split("\n")[1:] == [
        "22B\t/memories", "1B\t/memories/d/", "1B\t/memories/d/x.md", "3B\t/memories/e/", "3B\t/memories/e/new.md",
        "18B\t/memories/policy.md",
    ]


def test_an_update_cannot_make_a_record_a_second_file_or_move_one_onto_another(
    owner: MnemoClient, db: str, shared: dict[str, str]
) -> None:
    """update(id, tags=...) that makes a record a file, or moves a file, meets the same check; one that
    keeps a file's path (or changes only its content) does not. The check leaves the record itself
    out: a file may take the path of the directory only it makes."""
    owner.grant("editor", TEAM, ["read", "write"])
    with MnemoClient(db, "editor", durability="none") as e:
        plain = e.remember("a note", tags=("note",), scope=TEAM)
        head, stored = owner.head, snapshot(db)
        for rec_id, path, message in [
            (plain.id, "/memories/policy.md", TAKEN.format("/memories/policy.md")),
            (shared["/memories/d/x.md"], "/memories/policy.md", TAKEN.format("/memories/policy.md")),
            (shared["/memories/d/x.md"], "/memories/policy.md/x.md",
             ABOVE.format("/memories/policy.md", "/memories/policy.md/x.md")),
            (shared["/memories/policy.md"], "/memories/d", BENEATH.format("/memories/d")),
            (plain.id, "/memories/d/x.md/y", ABOVE.format("/memories/d/x.md", "/memories/d/x.md/y")),
        ]:
            with pytest.raises(InvalidInput) as exc:
                e.update(rec_id, tags=file_tags(path))
            assert str(exc.value) == message, (rec_id, path)
        assert (owner.head, snapshot(db)) == (head, stored)
        policy = shared["/memories/policy.md"]
        assert e.update(policy, content="edited").tags == file_tags("/memories/policy.md")
        assert e.update(policy, tags=file_tags("/memories/policy.md", "kept")).version == 3
        assert e.update(shared["/memories/d/x.md"], tags=file_tags("/memories/d")).tags == file_tags("/memories/d")
        with pytest.raises(InvalidInput, match="at /memories/d, readable by you or not, so /memories/d/x.md cannot"):
            e.update(plain.id, tags=file_tags("/memories/d/x.md"))  # /memories/d is a file now
        assert e.update(plain.id, tags=file_tags("/memories/free.md")).tags == file_tags("/memories/free.md")


def test_a_transaction_sees_the_files_it_made_moved_and_forgot(owner: MnemoClient, db: str) -> None:
    """Inside one transaction the check counts its own writes: a second file at a path it just used is
    refused (and the transaction with it), a path it freed by a forget or a move may be used again."""
    head, stored = owner.head, snapshot(db)
    with pytest.raises(InvalidInput) as exc, owner.transaction():
        owner.remember("one", tags=file_tags("/memories/a.md"), scope=TEAM)
        owner.remember("two", tags=file_tags("/memories/a.md"), scope=TEAM)
    assert str(exc.value) == TAKEN.format("/memories/a.md")
    with pytest.raises(InvalidInput) as exc, owner.transaction():
        owner.remember("one", tags=file_tags("/memories/a/b.md"), scope=TEAM)
        owner.remember("two", tags=file_tags("/memories/a"), scope=TEAM)
    assert str(exc.value) == BENEATH.format("/memories/a")
    assert (owner.head, snapshot(db)) == (head, stored)
    with owner.transaction():
        gone = owner.remember("one", tags=file_tags("/memories/a.md"), scope=TEAM)
        moved = owner.remember("two", tags=file_tags("/memories/b.md"), scope=TEAM)
        owner.forget(gone.id)
        owner.update(moved.id, tags=file_tags("/memories/c.md"))
        owner.remember("three", tags=file_tags("/memories/a.md"), scope=TEAM)
        owner.remember("four", tags=file_tags("/memories/b.md/d.md"), scope=TEAM)
    found = {r.tags[-1]: r.content for r in owner.query(tags=("memorytool",), scope=TEAM)}
    assert found == {"path:/memories/a.md": "three", "path:/memories/c.md": "two", "path:/memories/b.md/d.md": "four"}


def test_the_check_is_per_scope_and_needs_write_first(owner: MnemoClient, db: str, shared: dict[str, str]) -> None:
    """The same path in another scope is another file; an agent that may not write the scope learns
    nothing of its files (the permission error comes first)."""
    owner.remember("mine", tags=file_tags("/memories/policy.md"))
    with MnemoClient(db, "stranger", durability="none") as s:
        with pytest.raises(PermissionDenied, match="stranger may not write in scope team:research"):
            s.remember("x", tags=file_tags("/memories/policy.md"), scope=TEAM)
        with pytest.raises(PermissionDenied, match="stranger may not write in scope team:research"):
            s.remember("x", tags=file_tags("/memories/free.md"), scope=TEAM)


def test_writers_racing_for_one_path_through_the_client_make_one_file(owner: MnemoClient, db: str) -> None:
    """The check and the put are one step under the writer lock: of four clients that remember a file at
    the same path at once (write-only agents among them), exactly one succeeds, each round."""
    for agent in ("w1", "w2", "w3"):
        owner.grant(agent, TEAM, ["write"])
    clients = [MnemoClient(db, agent, durability="none", lock_timeout=30) for agent in ("owner", "w1", "w2", "w3")]
    try:
        for round_ in range(5):
            path = f"/memories/race-{round_}.md"
            start = threading.Barrier(len(clients), timeout=30)
            outcomes: list[str] = []

            def write(c: MnemoClient, path: str = path, start: threading.Barrier = start,
                      outcomes: list[str] = outcomes) -> None:
                start.wait()
                try:
                    c.remember(f"by {c.agent_id}", tags=file_tags(path), scope=TEAM)
                    outcomes.append("written")
                except InvalidInput as exc:
                    outcomes.append(str(exc))

            threads = [threading.Thread(target=write, args=(c,)) for c in clients]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            assert not any(t.is_alive() for t in threads)
            assert sorted(outcomes) == sorted(["written"] + [TAKEN.format(path)] * 3), outcomes
            assert len(owner.query(tags=(f"path:{path}",), scope=TEAM)) == 1
    finally:
        for c in clients:
            c.close()


def test_a_file_at_a_root_left_by_an_earlier_version_keeps_no_file_from_the_tree(
    owner: MnemoClient, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file is a root and a name at least, so only such paths are ancestors that can block a file: a
    record at `path:/memories` (which an earlier version let the client write, and which no server
    shows) does not keep files from being made under /memories, by the client or by the tool."""
    with monkeypatch.context() as old_version:
        # no path rules, no check (remember's are codec.checked_put_twin's, where the C path leaves memorytool tags)
        old_version.setattr(codec_module, "file_path", lambda tags: None)
        owner.remember("a root as a file", tags=file_tags("/memories"), scope=TEAM)
    owner.remember("below it", tags=file_tags("/memories/a.md"), scope=TEAM)
    team = MnemoMemoryToolServer(owner, scope=TEAM)
    assert not team.execute({"command": "create", "path": "/memories/d/b.md", "file_text": "b"}).is_error
    assert listing(team) == ["9B\t/memories", "8B\t/memories/a.md", "1B\t/memories/d/", "1B\t/memories/d/b.md"]
