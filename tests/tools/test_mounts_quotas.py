"""Quotas over mounts (docs/MOUNTS.md, docs/MEMORY_TOOL.md §10): each scope counts its own files; the usage a
server remembers for a scope is the index's at every head it holds it for; a run of writes reads each
scope's usage once. Both backends, through the `db` fixture."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers.tool_commands import commands as tool_commands
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemo import MnemoClient
from mnemo.tools import CommandResult, MnemoMemoryToolServer
from mnemo.tools.quotas import BYTES_TEXT, FILES_TEXT

TEAM = "team:research"
MOUNTS = {"/memories": "agent:me", "/memories/team": TEAM}


@pytest.fixture
def me(db: str) -> Iterator[MnemoClient]:
    with MnemoClient(db, "admin", durability="none") as admin:  # the first to open owns the database
        admin.grant("me", TEAM, ["read", "write", "forget"])
    with MnemoClient(db, "me", durability="none") as c:
        yield c


def ok(server: MnemoMemoryToolServer, command: str, **fields: Any) -> None:
    result = server.execute({"command": command, **fields})
    assert not result.is_error, result.text


def remembered(server: MnemoMemoryToolServer) -> dict[str, tuple[tuple[int, str], tuple[int, int, int]]]:
    mounted = server._mounted
    assert mounted is not None
    return {scope: (head, (u.files, u.live_bytes, u.history_bytes)) for scope, (head, u) in mounted._usage_at.items()}


def fresh(client: MnemoClient, scope: str) -> tuple[int, int, int]:
    found = client.scope_usage(scope, "memorytool")
    return found.records, found.latest_bytes, found.version_bytes


def test_each_scope_counts_its_own_files(me: MnemoClient) -> None:
    server = MnemoMemoryToolServer(me, mounts=MOUNTS, max_files=2)
    for path in ("/memories/a", "/memories/b", "/memories/team/a", "/memories/team/b"):
        ok(server, "create", path=path, file_text="x")
    head = me._chain_head()
    assert server.execute({"command": "create", "path": "/memories/team/c", "file_text": "x"}) == CommandResult(
        FILES_TEXT.format(action="create /memories/team/c", n=2, limit=2), True)
    assert server.execute({"command": "rename", "old_path": "/memories/a", "new_path": "/memories/team/c"}) == (
        CommandResult(FILES_TEXT.format(action="rename /memories/a", n=2, limit=2), True))
    assert me._chain_head() == head
    ok(server, "delete", path="/memories/team/b")
    ok(server, "rename", old_path="/memories/a", new_path="/memories/team/c")  # room again, in the team's scope
    ok(server, "create", path="/memories/a", file_text="x")  # and the move freed one in mine
    assert fresh(me, TEAM)[0] == fresh(me, "agent:me")[0] == 2


def test_a_run_of_writes_to_one_scope_reads_its_usage_once(me: MnemoClient, monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """The usage a command leaves is carried over to the head it committed, for the scope it wrote; a
    write to another scope moves the head, so the next write to the first reads its usage again."""
    server = MnemoMemoryToolServer(me, mounts=MOUNTS, max_files=10)
    reads: list[str] = []
    scope_usage = me.scope_usage

    def counting(scope: str, *args: Any) -> Any:
        reads.append(scope)
        return scope_usage(scope, *args)

    monkeypatch.setattr(me, "scope_usage", counting)
    ok(server, "create", path="/memories/team/a", file_text="two")
    for i in range(5):
        ok(server, "str_replace", path="/memories/team/a", old_str="two", new_str=f"two {i}")
        ok(server, "view", path="/memories/team/a")
    ok(server, "rename", old_path="/memories/team/a", new_path="/memories/team/b")
    ok(server, "create", path="/memories/team/c", file_text="three")
    assert reads == [TEAM]
    team_head = me._chain_head()
    ok(server, "create", path="/memories/a", file_text="one")
    for i in range(5):
        ok(server, "insert", path="/memories/a", insert_line=0, insert_text=f"{i}\n")
    assert reads == [TEAM, "agent:me"]
    monkeypatch.setattr(me, "scope_usage", scope_usage)
    assert remembered(server) == {
        TEAM: (team_head, fresh(me, TEAM)),
        "agent:me": (me._chain_head(), fresh(me, "agent:me")),
    }
    assert fresh(me, TEAM)[0] == 2
    ok(server, "create", path="/memories/team/d", file_text="four")  # the team's usage is read again
    assert remembered(server)[TEAM] == (me._chain_head(), fresh(me, TEAM))


PATHS = st.sampled_from(["/memories/a", "/memories/d/b", "/memories/team/a", "/memories/team/d/b", "/memories/team"])
TEXT = st.text(alphabet="ab\né", max_size=20)
COMMANDS = st.one_of(tool_commands(PATHS, TEXT, view=False), st.just("someone else writes"))


def test_the_remembered_usage_of_every_scope_is_the_indexs(backend: str, new_db: Callable[[], str]) -> None:
    """Whatever commands run, across mounts too, and whoever else writes, the usage a server holds for a
    scope at the current head is what a fresh read of the index gives."""

    @settings(max_examples=40 if backend == "file" else 12, deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(COMMANDS, min_size=1, max_size=20), st.booleans())
    def check(sequence: list[Any], overwrite: bool) -> None:
        path = new_db()
        with MnemoClient(path, "admin", durability="none") as admin:
            admin.grant("me", TEAM, ["read", "write", "forget"])
            with MnemoClient(path, "me", durability="none") as c:
                server = MnemoMemoryToolServer(c, mounts=MOUNTS, create_overwrites=overwrite, max_files=4,
                                               max_total_bytes=60, max_history_bytes=150)
                for n, command in enumerate(sequence):
                    if command == "someone else writes":
                        admin.remember(f"other {n}", scope=TEAM, tags=("memorytool", f"path:/memories/o{n}"))
                        continue
                    server.execute(command)
                    head = c._chain_head()
                    for scope, (at, usage) in remembered(server).items():
                        if at == head:
                            assert usage == fresh(c, scope), (scope, command)

    check()


def test_edits_of_a_mounted_file_count_only_the_change_of_its_size(me: MnemoClient) -> None:
    server = MnemoMemoryToolServer(me, mounts=MOUNTS, max_total_bytes=12)
    ok(server, "create", path="/memories/team/a", file_text="123456")
    ok(server, "insert", path="/memories/team/a", insert_line=0, insert_text="78")  # "78\n123456\n": 10 bytes
    ok(server, "str_replace", path="/memories/team/a", old_str="78", new_str="7")  # 9
    assert fresh(me, TEAM)[1] == 9
    head = me._chain_head()
    assert server.execute({"command": "insert", "path": "/memories/team/a", "insert_line": 0, "insert_text": "9ab"}
                          ) == CommandResult(BYTES_TEXT.format(action="edit /memories/team/a", new=13, limit=12, now=9),
                                             True)
    assert server.execute({"command": "str_replace", "path": "/memories/team/a", "old_str": "7", "new_str": "7abcd"}
                          ) == CommandResult(BYTES_TEXT.format(action="edit /memories/team/a", new=13, limit=12, now=9),
                                             True)
    assert me._chain_head() == head


def test_mounts_without_scope_wide_limits_never_scan_and_keep_writing(
    me: MnemoClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no limit on files or bytes per scope, no usage is ever asked for, and the writes that have
    nothing remembered to carry over go on as usual."""
    def no_scan(*args: Any) -> Any:
        raise AssertionError("usage asked for with no scope-wide limit")

    monkeypatch.setattr(me, "scope_usage", no_scan)
    server = MnemoMemoryToolServer(me, mounts=MOUNTS, max_files=None, max_total_bytes=None, max_history_bytes=None)
    for path in ("/memories/a.md", "/memories/team/t.md"):
        ok(server, "create", path=path, file_text="one")
        ok(server, "str_replace", path=path, old_str="one", new_str="two")
        ok(server, "insert", path=path, insert_line=0, insert_text="zero")
    ok(server, "rename", old_path="/memories/a.md", new_path="/memories/team/a.md")
    assert server.execute({"command": "view", "path": "/memories/team/a.md"}) == CommandResult(
        "Here's the content of /memories/team/a.md with line numbers:\n     1\tzero\n     2\ttwo\n     3\t")
