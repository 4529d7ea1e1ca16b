"""Per-scope quotas of the memory tool (docs/MEMORY_TOOL.md §10): each refusal's exact text, nothing
written when refused, what frees room, files the caller cannot read counted, and what the checks cost.
On both backends."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.backends import state as db_state
from helpers.tool_commands import commands as tool_commands

from mnemo import MnemoClient
from mnemo.errors import InvalidInput
from mnemo.tools import CommandResult, MnemoMemoryToolServer
from mnemo.tools.quotas import BYTES_TEXT_BLIND, FILES_TEXT_BLIND, HISTORY_TEXT_BLIND, Quotas


def run(server: MnemoMemoryToolServer, **tool_input: Any) -> CommandResult:
    return server.execute(tool_input)


def ok(server: MnemoMemoryToolServer, **tool_input: Any) -> None:
    result = server.execute(tool_input)
    assert not result.is_error, result


def state(client: MnemoClient, db: str) -> tuple[Any, ...]:
    """Everything a refused command must leave as it was: the head, the records, what the database holds."""
    records = [(i.id, i.version, i.tags, i.size) for i in client.list_records()]
    return client._chain_head(), records, db_state(db)


def refused(server: MnemoMemoryToolServer, client: MnemoClient, db: str, text: str, **tool_input: Any) -> None:
    before = state(client, db)
    assert server.execute(tool_input) == CommandResult(text, True)
    assert state(client, db) == before


VERSIONS = (
    "Error: Cannot {action}: {file} already has {n} versions, the most a file may keep is {limit}. "
    "Delete it and create it again to drop its old versions (view it first to keep what it holds)."
)
FILES = (
    "Error: Cannot {action}: the memory already holds {n} files, the most it may hold is {limit}. "
    "Delete files you no longer need to make room."
)
BYTES = (
    "Error: Cannot {action}: the memory's files would hold {new} bytes, over the limit of {limit} bytes "
    "(they hold {now} bytes now). Delete files you no longer need, or shorten them, to make room."
)
HISTORY = (
    "Error: Cannot {action}: the memory would keep {new} bytes of file versions, over the limit of {limit} "
    "bytes (it keeps {now} bytes now). Every change keeps the previous version of the file: delete files you "
    "no longer need, or delete a file and create it again to drop its old versions."
)


# -- configuration --------------------------------------------------------------------------------------


def test_defaults_and_settings(client: MnemoClient) -> None:
    assert MnemoMemoryToolServer(client).quotas == Quotas(
        max_versions_per_file=1000, max_files=1000, max_total_bytes=16 << 20, max_history_bytes=64 << 20
    )
    server = MnemoMemoryToolServer(
        client, max_files=5, max_total_bytes=None, max_history_bytes=7, max_versions_per_file=None
    )
    assert server.quotas == Quotas(max_versions_per_file=None, max_files=5, max_total_bytes=None, max_history_bytes=7)
    for name in ("max_files", "max_total_bytes", "max_history_bytes", "max_versions_per_file"):
        for bad in (0, -1, True, 1.5, "10"):
            with pytest.raises(InvalidInput, match=f"{name} must be a positive integer or None"):
                MnemoMemoryToolServer(client, **{name: bad})
    with pytest.raises(TypeError):
        MnemoMemoryToolServer(client, "/memories", None, False, False, 1024, 16000, 1024, 5)  # type: ignore[misc]


# -- the number of files ------------------------------------------------------------------------------


def test_file_count(client: MnemoClient, db: str) -> None:
    server = MnemoMemoryToolServer(client, max_files=3, create_overwrites=True)
    for name in ("a", "b", "d/c"):
        ok(server, command="create", path=f"/memories/{name}", file_text=name)
    refused(
        server, client, db, FILES.format(action="create /memories/e", n=3, limit=3),
        command="create", path="/memories/e", file_text="e",
    )
    # overwriting, editing and renaming add no file
    ok(server, command="create", path="/memories/a", file_text="a2")
    ok(server, command="str_replace", path="/memories/a", old_str="a2", new_str="a3")
    ok(server, command="rename", old_path="/memories/d", new_path="/memories/f")
    # deleting a file makes room for one
    ok(server, command="delete", path="/memories/b")
    ok(server, command="create", path="/memories/e", file_text="e")


# -- the bytes of the latest versions ----------------------------------------------------------------


def test_total_bytes(client: MnemoClient, db: str) -> None:
    server = MnemoMemoryToolServer(client, max_total_bytes=100)
    ok(server, command="create", path="/memories/a", file_text="a" * 60)
    refused(
        server, client, db, BYTES.format(action="create /memories/b", new=110, limit=100, now=60),
        command="create", path="/memories/b", file_text="é" * 25,  # 50 bytes of UTF-8
    )
    ok(server, command="create", path="/memories/b", file_text="b" * 40)
    refused(
        server, client, db, BYTES.format(action="edit /memories/b", new=102, limit=100, now=100),
        command="insert", path="/memories/b", insert_line=0, insert_text="",  # "\n" + "b" * 40 + "\n"
    )
    refused(
        server, client, db, BYTES.format(action="edit /memories/b", new=101, limit=100, now=100),
        command="str_replace", path="/memories/b", old_str="b" * 40, new_str="c" * 41,
    )
    # an edit that shrinks is allowed, even where usage is over a lowered limit
    lower = MnemoMemoryToolServer(client, max_total_bytes=50)
    ok(lower, command="str_replace", path="/memories/a", old_str="a" * 60, new_str="a" * 30)
    refused(
        lower, client, db, BYTES.format(action="edit /memories/a", new=71, limit=50, now=70),
        command="str_replace", path="/memories/a", old_str="a" * 30, new_str="a" * 31,
    )
    ok(lower, command="delete", path="/memories/b")
    ok(lower, command="str_replace", path="/memories/a", old_str="a" * 30, new_str="a" * 50)


def test_an_overwriting_create_counts_the_new_bytes_in_place_of_the_old(client: MnemoClient, db: str) -> None:
    """With create_overwrites, creating an existing file replaces its bytes: what counts against the limit
    is the memory with the new text instead of the old."""
    server = MnemoMemoryToolServer(client, max_total_bytes=100, create_overwrites=True)
    ok(server, command="create", path="/memories/a", file_text="a" * 60)
    ok(server, command="create", path="/memories/b", file_text="b" * 10)
    ok(server, command="create", path="/memories/a", file_text="A" * 90)  # 100 bytes: exactly full
    refused(
        server, client, db, BYTES.format(action="create /memories/a", new=101, limit=100, now=100),
        command="create", path="/memories/a", file_text="A" * 91,
    )
    ok(server, command="create", path="/memories/a", file_text="a")
    ok(server, command="create", path="/memories/c", file_text="c" * 89)


def test_a_rename_at_the_byte_limit_moves_bytes_and_adds_none(client: MnemoClient, db: str) -> None:
    """A rename keeps the bytes of the latest versions as they are: it is allowed with the memory exactly
    full, and afterwards the memory holds what it held (one more byte is refused, counted from there)."""
    server = MnemoMemoryToolServer(client, max_total_bytes=100)
    ok(server, command="create", path="/memories/a", file_text="a" * 60)
    ok(server, command="create", path="/memories/d/b", file_text="b" * 40)
    ok(server, command="rename", old_path="/memories/a", new_path="/memories/c")
    ok(server, command="rename", old_path="/memories/d", new_path="/memories/e")
    refused(
        server, client, db, BYTES.format(action="create /memories/f", new=101, limit=100, now=100),
        command="create", path="/memories/f", file_text="f",
    )
    ok(server, command="delete", path="/memories/c")
    ok(server, command="create", path="/memories/f", file_text="f" * 60)


# -- the bytes of every kept version ------------------------------------------------------------------


def test_history_bytes_stop_the_one_character_edit_attack(client: MnemoClient, db: str) -> None:
    """Each one-character edit of a large file keeps a whole new version: the budget stops it."""
    server = MnemoMemoryToolServer(client, max_history_bytes=10_000)
    ok(server, command="create", path="/memories/big", file_text="x" * 2999 + "0")
    for i in range(2):
        ok(server, command="str_replace", path="/memories/big", old_str=str(i), new_str=str(i + 1))
    refused(
        server, client, db, HISTORY.format(action="edit /memories/big", new=12_000, limit=10_000, now=9000),
        command="str_replace", path="/memories/big", old_str="2", new_str="3",
    )
    assert [len(r.content) for r in server.history("/memories/big")] == [3000, 3000, 3000]
    # a new file is refused too; deleting the file and creating it again drops its old versions
    refused(
        server, client, db, HISTORY.format(action="create /memories/new", new=10_001, limit=10_000, now=9000),
        command="create", path="/memories/new", file_text="y" * 1001,
    )
    ok(server, command="delete", path="/memories/big")
    ok(server, command="create", path="/memories/big", file_text="x" * 3000)
    ok(server, command="create", path="/memories/new", file_text="y" * 1001)


def test_history_bytes_count_renames(client: MnemoClient, db: str) -> None:
    """A rename writes each moved file again as a new version: its bytes count."""
    server = MnemoMemoryToolServer(client, max_history_bytes=1000)
    for i in range(3):
        ok(server, command="create", path=f"/memories/d/f{i}", file_text="z" * 200)
    ok(server, command="rename", old_path="/memories/d/f0", new_path="/memories/d/g0")  # 800 kept
    refused(
        server, client, db, HISTORY.format(action="rename /memories/d", new=1400, limit=1000, now=800),
        command="rename", old_path="/memories/d", new_path="/memories/e",
    )


def test_each_root_counts_its_own_files(client: MnemoClient, db: str) -> None:
    """Quotas count the memory-tool files of the scope under the server's root: a server of another
    root on the same scope counts its own."""
    notes = MnemoMemoryToolServer(client, root="/notes")
    ok(notes, command="create", path="/notes/a", file_text="n" * 90)
    client.remember("not a file", tags=("other",))  # no memorytool tag: not counted
    server = MnemoMemoryToolServer(client, max_history_bytes=100, max_files=2, max_total_bytes=95)
    ok(server, command="create", path="/memories/a", file_text="m" * 11)  # /notes/a is not /memories'
    refused(
        server, client, db, BYTES.format(action="create /memories/b", new=96, limit=95, now=11),
        command="create", path="/memories/b", file_text="m" * 85,
    )
    ok(server, command="create", path="/memories/b", file_text="m" * 5)
    refused(
        server, client, db, FILES.format(action="create /memories/c", n=2, limit=2),
        command="create", path="/memories/c", file_text="",
    )
    limited_notes = MnemoMemoryToolServer(client, root="/notes", max_total_bytes=95)
    refused(
        limited_notes, client, db, BYTES.format(action="create /notes/b", new=96, limit=95, now=90),
        command="create", path="/notes/b", file_text="n" * 6,
    )


# -- the versions of one file -------------------------------------------------------------------------


def test_versions_per_file(client: MnemoClient, db: str) -> None:
    server = MnemoMemoryToolServer(client, max_versions_per_file=3, create_overwrites=True)
    ok(server, command="create", path="/memories/f", file_text="0")
    ok(server, command="str_replace", path="/memories/f", old_str="0", new_str="1")
    ok(server, command="insert", path="/memories/f", insert_line=0, insert_text="top")
    for tool_input, action in [
        ({"command": "str_replace", "path": "/memories//f", "old_str": "1", "new_str": "2"}, "edit /memories//f"),
        ({"command": "insert", "path": "/memories/f", "insert_line": 0, "insert_text": "x"}, "edit /memories/f"),
        ({"command": "create", "path": "/memories/f", "file_text": "new"}, "create /memories/f"),
        ({"command": "rename", "old_path": "/memories/f", "new_path": "/memories/g"}, "rename /memories/f"),
    ]:
        refused(
            server, client, db, VERSIONS.format(action=action, file="/memories/f", n=3, limit=3), **tool_input
        )
    # a directory rename names the file that is full
    ok(server, command="create", path="/memories/d/a", file_text="a")
    for i in range(2):
        ok(server, command="insert", path="/memories/d/a", insert_line=0, insert_text=str(i))
    refused(
        server, client, db, VERSIONS.format(action="rename /memories/d/", file="/memories/d/a", n=3, limit=3),
        command="rename", old_path="/memories/d/", new_path="/memories/e",
    )
    ok(server, command="view", path="/memories/f")
    ok(server, command="delete", path="/memories/f")
    ok(server, command="create", path="/memories/f", file_text="fresh")
    ok(server, command="str_replace", path="/memories/f", old_str="fresh", new_str="again")


def test_size_limit_comes_before_quotas(client: MnemoClient, db: str) -> None:
    server = MnemoMemoryToolServer(client, max_file_bytes=10, max_total_bytes=5)
    refused(
        server, client, db, "Error: File /memories/a would be 11 bytes, over the limit of 10 bytes",
        command="create", path="/memories/a", file_text="a" * 11,
    )
    refused(
        server, client, db, BYTES.format(action="create /memories/a", new=6, limit=5, now=0),
        command="create", path="/memories/a", file_text="a" * 6,
    )


def test_none_disables_and_skips_the_scan(client: MnemoClient, monkeypatch: pytest.MonkeyPatch) -> None:
    server = MnemoMemoryToolServer(
        client, max_files=None, max_total_bytes=None, max_history_bytes=None, max_versions_per_file=None,
        max_file_bytes=4096,
    )

    def no_scan(*args: object) -> Any:
        raise AssertionError("a command scanned the scope with every scope-wide quota disabled")

    monkeypatch.setattr(client, "scope_usage", no_scan)
    ok(server, command="create", path="/memories/f", file_text="x" * 4095 + "0")
    for i in range(30):
        ok(server, command="str_replace", path="/memories/f", old_str=str(i % 10), new_str=str((i + 1) % 10))
    assert len(server.history("/memories/f")) == 31
    # a delete never needs the scan, even with quotas on
    limited = MnemoMemoryToolServer(client)
    ok(limited, command="delete", path="/memories/f")


# -- an agent that may write but not read ------------------------------------------------------------


def test_write_only_agent_cannot_bypass_quotas(client: MnemoClient, db: str) -> None:
    owner = MnemoMemoryToolServer(client, scope="team:x")
    for i in range(3):
        ok(owner, command="create", path=f"/memories/owner{i}", file_text="o" * 100)
    client.grant("agent-2", "team:x", ["write"])
    with MnemoClient(db, "agent-2", durability="none") as other_client:
        writer = MnemoMemoryToolServer(
            other_client, scope="team:x", max_files=4, max_total_bytes=350, max_history_bytes=360
        )
        assert other_client.list_records(scope="team:x") == []  # it cannot see the owner's files
        # refused by the limits, told the limit and never the figures of a scope it cannot read
        refused(
            writer, other_client, db, BYTES_TEXT_BLIND.format(action="create /memories/w", limit=350),
            command="create", path="/memories/w", file_text="w" * 60,
        )
        ok(writer, command="create", path="/memories/w", file_text="w" * 50)
        refused(
            writer, other_client, db, FILES_TEXT_BLIND.format(action="create /memories/v", limit=4),
            command="create", path="/memories/v", file_text="",
        )
        history = MnemoMemoryToolServer(other_client, scope="team:x", max_history_bytes=360)
        refused(
            history, other_client, db, HISTORY_TEXT_BLIND.format(action="create /memories/v", limit=360),
            command="create", path="/memories/v", file_text="v" * 20,
        )
    assert BYTES_TEXT_BLIND.format(action="create /memories/w", limit=350) == (
        "Error: Cannot create /memories/w: the memory's files would hold more than the limit of 350 bytes. Ask an "
        "agent that reads it to delete or shorten files no longer needed.")
    assert len(client.list_records(scope="team:x")) == 4
    # an agent that reads the scope is told its figures
    owner_limited = MnemoMemoryToolServer(client, scope="team:x", max_files=4)
    refused(owner_limited, client, db, FILES.format(action="create /memories/u", n=4, limit=4),
            command="create", path="/memories/u", file_text="")


def test_files_under_another_root_count_toward_that_root_only(client: MnemoClient, db: str) -> None:
    """A writer of the scope that fills it with memory-tool files under a root no server of the owner
    serves takes none of the owner's quota: what a server counts is what it lists and can delete."""
    client.grant("eve", "team:x", ["write"])
    with MnemoClient(db, "eve", durability="none") as eve, eve.transaction():
        for i in range(5):
            eve.remember("h" * 100, tags=["memorytool", f"path:/h/{i}"], scope="team:x")
        eve.remember("m", tags=["memorytool", "path:/memoriesX/m"], scope="team:x")  # not under /memories/
    server = MnemoMemoryToolServer(client, scope="team:x", max_files=2, max_total_bytes=10)
    assert server.execute({"command": "view", "path": "/memories"}).text.endswith("\n0B\t/memories")
    ok(server, command="create", path="/memories/a", file_text="12345")
    refused(server, client, db, BYTES.format(action="create /memories/b", new=11, limit=10, now=5),
            command="create", path="/memories/b", file_text="123456")
    other_root = MnemoMemoryToolServer(client, scope="team:x", root="/h", max_files=5)
    refused(other_root, client, db, FILES.format(action="create /h/new", n=5, limit=5),
            command="create", path="/h/new", file_text="x")
    usage = client.scope_usage("team:x", "memorytool", "path:/memories/")
    assert (usage.records, usage.latest_bytes, usage.version_bytes) == (1, 5, 5)
    assert client.scope_usage("team:x", "memorytool").records == 7


# -- what the checks cost --------------------------------------------------------------------------------


def test_quota_checks_read_the_index_only(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A create with every quota on reads no content, and builds records only of the scope's files (of
    the file backend's index; PostgreSQL's usage is one query of the tables)."""
    with MnemoClient(db_path, "agent-1", durability="none") as client:
        quota_checks_read_the_index_only(client, monkeypatch)


def quota_checks_read_the_index_only(client: MnemoClient, monkeypatch: pytest.MonkeyPatch) -> None:
    with client.transaction():
        for i in range(300):
            client.remember(f"file {i}", tags=("memorytool", f"path:/memories/f{i}"))
        for i in range(2000):  # memory-tool files of other scopes, and other records of this one
            client.remember(f"elsewhere {i}", tags=("memorytool", f"path:/memories/f{i}"), scope=f"team:{i % 7}")
            client.remember(f"plain {i}", tags=("note",))
    server = MnemoMemoryToolServer(client)
    store = client._store
    index = store.index
    built = {"n": 0}
    rec_at = index.rec_at

    def counting_rec_at(*args: Any) -> Any:
        built["n"] += 1
        return rec_at(*args)

    def no_content(*args: object, **kwargs: object) -> Any:
        raise AssertionError("a quota check read content")

    monkeypatch.setattr(index, "rec_at", counting_rec_at)
    monkeypatch.setattr(store, "read_packed", no_content)
    assert server.execute({"command": "create", "path": "/memories/new", "file_text": "n"}).is_error is False
    # the 300 files of the scope once for the usage, plus a few lookups of the one path and its parent
    assert 300 <= built["n"] <= 300 + 10
    usage = client.scope_usage("agent:agent-1", "memorytool")
    assert usage.records == 301
    assert usage.latest_bytes == usage.version_bytes == sum(len(f"file {i}") for i in range(300)) + 1


def test_scope_usage_inside_a_transaction_counts_its_own_writes(client: MnemoClient) -> None:
    """Inside a transaction the usage is what it will be once the writes so far commit: a quota checked
    part way through a command sees the files the command already made, changed or forgot."""
    scope = "agent:agent-1"
    kept = client.remember("aaaa", tags=("memorytool", "path:/memories/kept"))
    client.remember("other tag", tags=("notes",))
    with client.transaction():
        made = client.remember("bb", tags=("memorytool", "path:/memories/made"))
        client.update(kept.id, content="a")
        assert client.scope_usage(scope, "memorytool") == (2, 1 + 2, 4 + 1 + 2)
        client.forget([made.id])
        assert client.scope_usage(scope, "memorytool") == (1, 1, 4 + 1)
        client.update(kept.id, tags=("notes",))
        assert client.scope_usage(scope, "memorytool") == (0, 0, 0)
        assert client.scope_usage(scope, "notes") == (2, 1 + 9, 4 + 1 + 1 + 9)
    assert client.scope_usage(scope, "notes") == (2, 1 + 9, 4 + 1 + 1 + 9)
    assert client.scope_usage(scope, "memorytool") == (0, 0, 0)


# -- the usage a server remembers between its own writes ---------------------------------------------


def test_a_run_of_writes_scans_once(client: MnemoClient, db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    server = MnemoMemoryToolServer(client, max_files=3)
    scans = {"n": 0}
    scope_usage = client.scope_usage

    def counting(*args: Any) -> Any:
        scans["n"] += 1
        return scope_usage(*args)

    monkeypatch.setattr(client, "scope_usage", counting)
    ok(server, command="create", path="/memories/a", file_text="a")
    for i in range(10):
        ok(server, command="insert", path="/memories/a", insert_line=0, insert_text=str(i))
        ok(server, command="view", path="/memories/a")
    ok(server, command="rename", old_path="/memories/a", new_path="/memories/b")
    ok(server, command="create", path="/memories/c", file_text="c")
    assert scans["n"] == 1
    # someone else's write moves the head: the next check reads the index again, and counts it
    with MnemoClient(db, "agent-1", durability="none") as other:
        other.remember("theirs", tags=("memorytool", "path:/memories/theirs"))
    refused(
        server, client, db, FILES.format(action="create /memories/d", n=3, limit=3),
        command="create", path="/memories/d", file_text="d",
    )
    assert scans["n"] == 2
    # a delete is not carried over: the next write reads the index again
    ok(server, command="delete", path="/memories/theirs")
    ok(server, command="create", path="/memories/d", file_text="d")
    assert scans["n"] == 3


def test_a_failed_write_is_not_counted(client: MnemoClient, db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    server = MnemoMemoryToolServer(client, max_total_bytes=10)
    ok(server, command="create", path="/memories/a", file_text="12345")
    real_remember = client.remember

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise OSError("disk went away")

    monkeypatch.setattr(client, "remember", failing)
    assert server.execute({"command": "create", "path": "/memories/b", "file_text": "1234"}).is_error
    monkeypatch.setattr(client, "remember", real_remember)
    refused(
        server, client, db, BYTES.format(action="create /memories/b", new=11, limit=10, now=5),
        command="create", path="/memories/b", file_text="123456",
    )


def test_the_remembered_usage_is_always_the_indexs(backend: str, new_db: Callable[[], str]) -> None:
    """Whatever commands run, and whoever else writes, the usage a server holds for the current head
    is what a fresh read of the index gives."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    names = st.sampled_from(["/memories/a", "/memories/b", "/memories/d/c", "/memories/d", "/memories/x"])
    text = st.text(alphabet="ab\né", max_size=30)
    commands = st.one_of(tool_commands(names, text), st.just("someone else writes"))

    @settings(max_examples=60 if backend == "file" else 20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(commands, min_size=1, max_size=25), st.booleans())
    def check(sequence: list[Any], overwrite: bool) -> None:
        path = new_db()
        with MnemoClient(path, "agent-1", durability="none") as c, MnemoClient(path, "agent-1") as other:
            server = MnemoMemoryToolServer(
                c, create_overwrites=overwrite, max_files=4, max_total_bytes=60, max_history_bytes=150
            )
            for n, command in enumerate(sequence):
                if command == "someone else writes":
                    other.remember(f"other {n}", tags=("memorytool", f"path:/memories/o{n}"))
                    continue
                server.execute(command)
                remembered = server._usage_at
                if remembered is not None and remembered[0] == c._chain_head():
                    fresh = c.scope_usage(c.home_scope, "memorytool")
                    assert (remembered[1].files, remembered[1].live_bytes, remembered[1].history_bytes) == (
                        fresh.records, fresh.latest_bytes, fresh.version_bytes
                    ), command

    check()
