"""What the memory tool server gives as values beside its commands' texts (for `mnemo ui`): the files at or
beneath a path with what the index knows of each, the mounts an agent sees, and the search's hits."""

from __future__ import annotations

import pytest

from mnemo import MnemoClient
from mnemo.errors import InvalidInput, NotFound, PermissionDenied
from mnemo.tools import MnemoMemoryToolServer


def make(server: MnemoMemoryToolServer, path: str, text: str) -> None:
    result = server.execute({"command": "create", "path": path, "file_text": text})
    assert not result.is_error, result.text


def test_files_lists_every_file_beneath_a_directory_sorted_with_its_index_facts(client: MnemoClient) -> None:
    server = MnemoMemoryToolServer(client)
    make(server, "/memories/b/2.md", "two")
    make(server, "/memories/a.md", "aaaa")
    make(server, "/memories/b/1.md", "1")
    server.execute({"command": "str_replace", "path": "/memories/a.md", "old_str": "aaaa", "new_str": "a"})
    listed = server.files()
    assert [(p, i.size, i.version) for p, i in listed] == [
        ("/memories/a.md", 1, 2), ("/memories/b/1.md", 1, 1), ("/memories/b/2.md", 3, 1),
    ]
    assert [p for p, _ in server.files("/memories/b/")] == ["/memories/b/1.md", "/memories/b/2.md"]
    assert [p for p, _ in server.files("/memories/a.md")] == ["/memories/a.md"]
    assert listed[0][1].agent_id == client.agent_id and listed[0][1].seq == client.head[0]


def test_files_with_mounts_shows_the_mounts_the_agent_may_read(db: str, client: MnemoClient) -> None:
    client.grant("bob", "team:r", ["read"])
    make(MnemoMemoryToolServer(client, scope="team:r"), "/memories/plan.md", "plan")
    make(MnemoMemoryToolServer(client, scope="team:s"), "/memories/secret.md", "secret")
    with MnemoClient(db, "bob", durability="none") as bob:
        server = MnemoMemoryToolServer(bob, mounts={"/memories/team": "team:r", "/memories/s": "team:s"})
        make(server, "/memories/mine.md", "mine")
        assert [p for p, _ in server.files()] == ["/memories/mine.md", "/memories/team/plan.md"]
        assert server.visible_mounts() == {"/memories": "agent:bob", "/memories/team": "team:r"}
        assert server.mounts == {"/memories": "agent:bob", "/memories/s": "team:s", "/memories/team": "team:r"}
        assert server.files("/memories/team") == [(p, i) for p, i in server.files() if p.startswith("/memories/team")]
        with pytest.raises(NotFound, match="^The path /memories/s does not exist$"):
            server.files("/memories/s")  # not mounted for bob: a path of his home, where nothing is


def test_files_refuses_bad_paths_and_scopes_it_may_not_read(db: str, client: MnemoClient) -> None:
    server = MnemoMemoryToolServer(client)
    make(server, "/memories/a.md", "a")
    with pytest.raises(InvalidInput, match="^Path must start with /memories, got: /etc$"):
        server.files("/etc")
    with pytest.raises(NotFound, match="^The path /memories/none does not exist$"):
        server.files("/memories/none")
    assert server.files("/memories/a.md/") == server.files("/memories/a.md")
    with MnemoClient(db, "eve", durability="none") as eve:
        spy = MnemoMemoryToolServer(eve, scope=client.home_scope)
        with pytest.raises(PermissionDenied, match=f"^eve may not read in scope {client.home_scope}$"):
            spy.files()
    empty = MnemoMemoryToolServer(client, scope="team:empty")
    assert empty.files() == []


def test_search_files_gives_the_searchs_hits_as_values(client: MnemoClient) -> None:
    server = MnemoMemoryToolServer(client)
    make(server, "/memories/a.md", "tea\nmore tea")
    make(server, "/memories/b.md", "coffee and tea")
    make(server, "/memories/c.md", "water")
    hits, more = server.search_files("tea")
    assert more is False
    assert sorted(p for p, _ in hits) == ["/memories/a.md", "/memories/b.md"]
    assert {p: h.lines for p, h in hits} == {"/memories/a.md": ((1, "tea"), (2, "more tea")),
                                             "/memories/b.md": ((1, "coffee and tea"),)}
    one, more = server.search_files("tea", limit=1)
    assert (len(one), more) == (1, True)
    assert server.search_files("tea", path="/memories/b.md")[0][0][0] == "/memories/b.md"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"query": '"open'}, "Invalid query: "),
        ({"query": "x", "path": "/etc"}, "Path must start with /memories, got: /etc"),
        ({"query": "x", "path": "/memories/none"},
         "The path /memories/none does not exist. Please provide a valid path."),
        ({"query": "x", "limit": 0}, "Parameter `limit` of command `search` must be an integer from 1 to 100"),
        ({"query": "x", "mode": "semantic"}, "Invalid mode: semantic needs an embedder"),
    ],
)
def test_search_files_refuses_as_the_search_does(client: MnemoClient, kwargs: dict[str, object], message: str) -> None:
    server = MnemoMemoryToolServer(client)
    make(server, "/memories/a.md", "a")
    with pytest.raises(InvalidInput) as refused:
        server.search_files(**kwargs)  # type: ignore[arg-type]
    assert str(refused.value).startswith(message)
    text = server.search(**kwargs).text  # type: ignore[arg-type]
    assert text == "Error: " + str(refused.value) or text == str(refused.value)


def test_a_view_lists_its_scope_alone_while_other_clients_write_in_every_scope(db: str, client: MnemoClient) -> None:
    # Every scope stores its files under path:/memories/...: the listing of one scope is its own files,
    # before and after writes, moves and deletes by another client, in its scope and in others.
    mine = MnemoMemoryToolServer(client, scope="team:a")
    make(mine, "/memories/a/1.md", "1")
    make(MnemoMemoryToolServer(client, scope="team:b"), "/memories/a/2.md", "22")
    assert mine.execute({"command": "view", "path": "/memories"}).text.split("\n")[1:] == [
        "1B\t/memories", "1B\t/memories/a/", "1B\t/memories/a/1.md",
    ]
    with MnemoClient(db, client.agent_id, durability="none") as other:
        theirs_a = MnemoMemoryToolServer(other, scope="team:a")
        theirs_b = MnemoMemoryToolServer(other, scope="team:b")
        make(theirs_a, "/memories/a/3.md", "333")
        make(theirs_b, "/memories/a/4.md", "4444")
        make(theirs_b, "/memories/a/1.md", "b's 1")  # the same path, in the other scope
        assert not theirs_a.execute({"command": "rename", "old_path": "/memories/a/1.md",
                                     "new_path": "/memories/z.md"}).is_error
        assert not theirs_b.execute({"command": "delete", "path": "/memories/a/2.md"}).is_error
    assert mine.execute({"command": "view", "path": "/memories"}).text.split("\n")[1:] == [
        "4B\t/memories", "3B\t/memories/a/", "3B\t/memories/a/3.md", "1B\t/memories/z.md",
    ]
    assert [p for p, _ in mine.files("/memories/a/")] == ["/memories/a/3.md"]
    assert [p for p, _ in MnemoMemoryToolServer(client, scope="team:b").files()] == [
        "/memories/a/1.md", "/memories/a/4.md",
    ]
    assert mine.execute({"command": "create", "path": "/memories/a/4.md", "file_text": "a's 4"}).text == (
        "File created successfully at: /memories/a/4.md"  # taken in team:b only
    )
    with client.transaction():  # new records of one commit, in both scopes
        for scope in ("team:a", "team:b"):
            client.remember("t", tags=["memorytool", "path:/memories/t.md"], scope=scope)
    assert mine.execute({"command": "view", "path": "/memories"}).text.split("\n")[1:] == [
        "10B\t/memories", "8B\t/memories/a/", "3B\t/memories/a/3.md", "5B\t/memories/a/4.md", "1B\t/memories/t.md",
        "1B\t/memories/z.md",
    ]
