"""MnemoMemoryToolServer on a real database: every command's texts, atomicity, permissions, history."""

from __future__ import annotations

import logging
import os
import struct
import subprocess
import sys
import textwrap
from types import SimpleNamespace
from typing import Any

import pytest
from helpers.backends import commits, is_pg, payload_reader, snapshot, stored
from helpers.paths import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemo import MnemoClient
from mnemo.errors import Conflict, InvalidInput, LockTimeout, MnemoError, NotFound
from mnemo.tools import CommandResult, MnemoMemoryToolServer
from mnemo.tools.commands import BINARY_TEXT
from mnemo.tools.server import STORE_FAILURES, format_size
from mnemo.validation import Limits

ROOT_HEADER = "Here're the files and directories up to 2 levels deep in {}, excluding hidden items and node_modules:"
FILE_HEADER = "Here's the content of {} with line numbers:"
MISSING = "The path {} does not exist. Please provide a valid path."
EDITED = "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"


def run(server: MnemoMemoryToolServer, **tool_input: Any) -> CommandResult:
    return server.execute(tool_input)


def ok(text: str) -> CommandResult:
    return CommandResult(text)


def bad(text: str) -> CommandResult:
    return CommandResult(text, True)


def count_frames(db: str) -> int:
    """Commits that wrote entries: on the file backend, frames in the log, read as docs/FORMAT.md lays
    them out."""
    if is_pg(db):
        return commits(db)
    with open(db, "rb") as f:
        data = f.read()
    assert data[:8] == b"MNEMOLOG"
    offset, frames = 32, 0
    while offset < len(data):
        magic, _count, _first, entries_len, payloads_len = struct.unpack_from(">4sIQII", data, offset)
        assert magic == b"MNFR"
        offset += 32 + entries_len + payloads_len
        frames += 1
    assert offset == len(data)
    return frames


def tagged_paths(client: MnemoClient) -> list[str]:
    return sorted(t[5:] for i in client.list_records(tags=("memorytool",)) for t in i.tags if t.startswith("path:"))


# -- definition and result blocks ----------------------------------------------------------------------


def test_tool_schema_and_beta_header(client: MnemoClient) -> None:
    server = MnemoMemoryToolServer(client)
    assert server.tool_schema() == {"type": "memory_20250818", "name": "memory"}
    assert server.beta_header() is None
    managed = MnemoMemoryToolServer(client, managed_agents_beta=True)
    assert managed.beta_header() == "managed-agents-2026-04-01"
    assert server.scope == "agent:agent-1"
    assert server.root == "/memories"


def test_handle_dict_and_object_blocks(server: MnemoMemoryToolServer) -> None:
    block = server.handle(
        {
            "type": "tool_use",
            "id": "toolu_01",
            "name": "memory",
            "input": {"command": "view", "path": "/memories"},
        }
    )
    assert block == {
        "type": "tool_result",
        "tool_use_id": "toolu_01",
        "content": ROOT_HEADER.format("/memories") + "\n0B\t/memories",
    }
    obj = SimpleNamespace(
        type="tool_use",
        id="toolu_02",
        name="memory",
        input={"command": "create", "path": "/memories/a.md", "file_text": "hi"},
    )
    assert server.handle(obj) == {
        "type": "tool_result",
        "tool_use_id": "toolu_02",
        "content": "File created successfully at: /memories/a.md",
    }
    assert server.handle({"type": "tool_use", "id": "toolu_03", "name": "bash", "input": {}}) == {
        "type": "tool_result",
        "tool_use_id": "toolu_03",
        "content": "Error: Unknown tool: bash",
        "is_error": True,
    }
    missing_input = server.handle({"type": "tool_use", "id": "toolu_04", "name": "memory"})
    assert missing_input["content"] == "Error: Invalid input: expected an object"
    assert missing_input["is_error"] is True
    assert server.handle(None)["content"] == "Error: Unknown tool: None"
    assert server.handle(42)["is_error"] is True


def test_constructor_checks(client: MnemoClient) -> None:
    for kwargs in (
        {"root": "memories"},
        {"root": "/a/../b"},
        {"max_file_bytes": 0},
        {"max_view_chars": True},
    ):
        with pytest.raises(InvalidInput):
            MnemoMemoryToolServer(client, **kwargs)


def test_size_settings_take_every_positive_integer_and_refuse_the_rest(client: MnemoClient) -> None:
    """The least size setting is 1 (a one-byte file is the biggest a server with max_file_bytes=1 keeps);
    0, negatives, bools and non-integers are refused with the setting's name."""
    server = MnemoMemoryToolServer(client, max_file_bytes=1)
    assert server.max_file_bytes == 1
    assert run(server, command="create", path="/memories/one", file_text="x").is_error is False
    assert run(server, command="create", path="/memories/two", file_text="xy") == bad(
        "Error: File /memories/two would be 2 bytes, over the limit of 1 bytes"
    )
    for name in ("max_file_bytes", "max_view_chars", "max_path_length"):
        for wrong in (0, -1, True, 1.5, "10"):
            with pytest.raises(InvalidInput) as info:
                MnemoMemoryToolServer(client, **{name: wrong})
            assert str(info.value) == f"{name} must be a positive integer, got {wrong!r}"


def test_settings_the_client_cannot_honour_are_refused(db: str) -> None:
    """A server promising more than its client stores would answer with the client's messages."""
    small = Limits(max_content_bytes=1000, max_tag_chars=300)
    with MnemoClient(db, "agent-1", durability="none", limits=small) as c:
        with pytest.raises(InvalidInput) as info:
            MnemoMemoryToolServer(c)
        assert str(info.value) == (
            "max_file_bytes (1048576) is over the client's content limit (client.limits.max_content_bytes = 1000):"
            " such a file could not be stored"
        )
        with pytest.raises(InvalidInput) as info:
            MnemoMemoryToolServer(c, max_file_bytes=1000)
        assert str(info.value) == (
            "max_path_length (1024) does not fit in a path tag: the client's tag limit "
            "(client.limits.max_tag_chars = 300) allows paths of at most 295 characters"
        )
        with pytest.raises(InvalidInput) as info:
            MnemoMemoryToolServer(c, max_file_bytes=1000, max_path_length=296)  # one past the most
        assert str(info.value).startswith("max_path_length (296) does not fit in a path tag")
        server = MnemoMemoryToolServer(c, max_file_bytes=1000, max_path_length=295)
        # an oversize file gets the contract's text, not the client's
        assert run(server, command="create", path="/memories/a", file_text="x" * 1001) == bad(
            "Error: File /memories/a would be 1001 bytes, over the limit of 1000 bytes"
        )
        fits = "/memories" + "/abcd" * 57  # 294 characters
        assert run(server, command="create", path=fits, file_text="x").is_error is False
        too_long = fits + "/a"
        assert run(server, command="create", path=too_long, file_text="x") == bad(f"Error: Invalid path: {too_long!r}")
    with MnemoClient(db, "agent-1", durability="none") as c:
        for kwargs in ({"scope": "team:*"}, {"scope": ""}, {"scope": 5}, {"root": "/" + "r" * 1023}):
            with pytest.raises(InvalidInput):
                MnemoMemoryToolServer(c, **kwargs)


def test_clear_all_on_the_server(client: MnemoClient, db: str) -> None:
    server = MnemoMemoryToolServer(client)
    run(server, command="create", path="/memories/a", file_text="a")
    client.close()
    with MnemoClient(db, "agent-1", readonly=True) as ro:
        assert MnemoMemoryToolServer(ro).clear_all() == bad("Error: The memory store is read-only")
    with MnemoClient(db, "agent-1", durability="none") as rw:
        assert MnemoMemoryToolServer(rw).clear_all() == ok("All memory cleared")
        assert tagged_paths(rw) == []


# -- view ----------------------------------------------------------------------------------------------


def test_view_root_empty_and_listing(server: MnemoMemoryToolServer) -> None:
    for path in ["/memories", "/memories/", "/memories/.", "/memories//"]:
        assert run(server, command="view", path=path) == ok(ROOT_HEADER.format(path) + "\n0B\t/memories")
    for path, text in [
        ("/memories/notes.md", "x" * 1536),
        ("/memories/projects/alpha/spec.md", "abc"),
        ("/memories/projects/alpha/deep/more.md", "12345"),
        ("/memories/projects/readme", ""),
        ("/memories/.private/key", "k" * 100),
        ("/memories/node_modules/x.js", "js"),
    ]:
        assert run(server, command="create", path=path, file_text=text).is_error is False
    assert run(server, command="view", path="/memories/") == ok(
        "\n".join(
            [
                ROOT_HEADER.format("/memories/"),
                "1.6K\t/memories",
                "1.5K\t/memories/notes.md",
                "8B\t/memories/projects/",
                "8B\t/memories/projects/alpha/",
                "0B\t/memories/projects/readme",
            ]
        )
    )
    assert run(server, command="view", path="/memories/projects") == ok(
        "\n".join(
            [
                ROOT_HEADER.format("/memories/projects"),
                "8B\t/memories/projects",
                "8B\t/memories/projects/alpha/",
                "5B\t/memories/projects/alpha/deep/",
                "3B\t/memories/projects/alpha/spec.md",
                "0B\t/memories/projects/readme",
            ]
        )
    )
    # hidden things can still be viewed by their full path
    assert run(server, command="view", path="/memories/.private") == ok(
        ROOT_HEADER.format("/memories/.private") + "\n100B\t/memories/.private\n100B\t/memories/.private/key"
    )
    assert run(server, command="view", path="/memories/node_modules/x.js") == ok(
        FILE_HEADER.format("/memories/node_modules/x.js") + "\n     1\tjs"
    )


def test_view_file_and_missing(server: MnemoMemoryToolServer) -> None:
    run(server, command="create", path="/memories/f.txt", file_text="one\ntwo\r\nthree\n")
    assert run(server, command="view", path="/memories//f.txt/") == ok(
        FILE_HEADER.format("/memories//f.txt/") + "\n     1\tone\n     2\ttwo\r\n     3\tthree\n     4\t"
    )
    assert run(server, command="view", path="/memories/f.txt", view_range=[2, 3]) == ok(
        FILE_HEADER.format("/memories/f.txt") + "\n     2\ttwo\r\n     3\tthree"
    )
    assert run(server, command="view", path="/memories/f.txt", view_range=[9, -1]) == ok(
        FILE_HEADER.format("/memories/f.txt") + "\n"
    )
    assert run(server, command="view", path="/memories/f.txt", view_range=[1, -3]) == bad(
        "Error: Invalid `view_range`: [1, -3]"
    )
    for path in ["/memories/nope", "/memories/f.txt/inner", "/memories/f"]:
        assert run(server, command="view", path=path) == bad(MISSING.format(path))


def test_view_long_file_is_cut(client: MnemoClient) -> None:
    server = MnemoMemoryToolServer(client, max_view_chars=1100, max_path_length=30)
    # 40 lines of 40 characters: each numbered line is 47 characters
    run(server, command="create", path="/memories/long", file_text="".join(f"{i:040d}\n" for i in range(40)))
    header = FILE_HEADER.format("/memories/long") + "\n"
    note = "... (showing lines 1-{} of 41; use view_range to see the rest)"
    # the header (56), k lines (48k - 1) and the note (1 + 62) must fit in 1,100 characters: k = 20
    shown = "\n".join(f"{n:>6}\t{n - 1:040d}" for n in range(1, 21))
    result = run(server, command="view", path="/memories/long")
    assert result == ok(header + shown + "\n" + note.format(20))
    assert len(result.text) <= 1100 < len(result.text) + 48


def test_view_of_a_large_directory_reads_no_content(
    client: MnemoClient, server: MnemoMemoryToolServer, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with client.transaction():
        for i in range(10_000):
            client.remember(f"memory {i}", tags=("memorytool", f"path:/memories/big/f{i:05d}.md"))
    store = client._store

    def no_content(*args: object, **kwargs: object) -> Any:
        raise AssertionError("a directory view read content")

    monkeypatch.setattr(store, payload_reader(db), no_content)
    for name in ("get", "query", "history"):
        monkeypatch.setattr(client, name, no_content)
    result = run(server, command="view", path="/memories/big")
    assert not result.is_error
    lines = result.text.split("\n")
    assert lines[1] == f"{sum(len(f'memory {i}') for i in range(10_000)) / 1024:.1f}K\t/memories/big"
    assert lines[2] == "8B\t/memories/big/f00000.md"
    # cut at whole lines within max_view_chars, with the listing note
    assert len(result.text) <= 16_000
    shown = len(lines) - 3
    assert lines[-2] == f"{format_size(len(f'memory {shown - 1}'))}\t/memories/big/f{shown - 1:05d}.md"
    assert lines[-1] == f"... (showing {shown} of 10000 entries; to list what a subdirectory holds, view its path)"
    assert len(result.text) + len(lines[-2]) + 1 > 16_000


def test_view_binary_record_is_decoded(client: MnemoClient, server: MnemoMemoryToolServer) -> None:
    client.remember(b"caf\xc3\xa9 \xff", tags=("memorytool", "path:/memories/bin"))
    assert run(server, command="view", path="/memories/bin") == ok(
        FILE_HEADER.format("/memories/bin") + "\n     1\tcafé \ufffd"
    )


def test_a_file_of_bytes_that_are_not_text_is_not_edited(
    client: MnemoClient, server: MnemoMemoryToolServer, db: str
) -> None:
    """An edit of content that is not UTF-8 would write U+FFFD over its bytes for good: refused, nothing
    written. Bytes that are UTF-8 are edited as the text they are."""
    binary = client.remember(b"caf\xc3\xa9 \xff", tags=("memorytool", "path:/memories/bin"))
    text = client.remember(b"caf\xc3\xa9", tags=("memorytool", "path:/memories/utf8"))
    head, size = client.head, snapshot(db)
    refusal = BINARY_TEXT.format(path="/memories/bin")
    assert refusal == ("Error: The file /memories/bin holds bytes that are not UTF-8 text, which an edit would "
                       "replace for good: it cannot be edited. View shows it with U+FFFD where the bytes are not "
                       "text; create a new file instead")
    assert run(server, command="str_replace", path="/memories/bin", old_str="caf", new_str="tea") == \
        CommandResult(refusal, True)
    assert run(server, command="insert", path="/memories/bin", insert_line=0, insert_text="x") == \
        CommandResult(refusal, True)
    assert (client.head, snapshot(db)) == (head, size) and client.get(binary.id).content == b"caf\xc3\xa9 \xff"
    assert not run(server, command="str_replace", path="/memories/utf8", old_str="caf", new_str="th").is_error
    assert client.get(text.id).content == "th\u00e9"


# -- create --------------------------------------------------------------------------------------------


def test_create(client: MnemoClient, server: MnemoMemoryToolServer) -> None:
    assert run(server, command="create", path="/memories/a/b.txt", file_text="no newline") == ok(
        "File created successfully at: /memories/a/b.txt"
    )
    rec = client.query(tags=("memorytool", "path:/memories/a/b.txt"))[0]
    assert rec.content == "no newline"
    assert rec.tags == ("memorytool", "path:/memories/a/b.txt")
    assert rec.scope == "agent:agent-1"
    assert run(server, command="create", path="/memories/a/b.txt", file_text="x") == bad(
        "Error: File /memories/a/b.txt already exists"
    )
    assert run(server, command="create", path="/memories/a/", file_text="x") == bad(
        "Error: File /memories/a/ already exists"
    )
    assert run(server, command="create", path="/memories", file_text="x") == bad("Error: File /memories already exists")
    assert run(server, command="create", path="/memories/a/b.txt/c/d", file_text="x") == bad(
        "Error: Cannot create /memories/a/b.txt/c/d: /memories/a/b.txt is a file"
    )
    assert tagged_paths(client) == ["/memories/a/b.txt"]


def test_create_size_limit_and_overwrite(client: MnemoClient) -> None:
    server = MnemoMemoryToolServer(client, max_file_bytes=10, create_overwrites=True)
    assert run(server, command="create", path="/memories/a", file_text="é" * 6) == bad(
        "Error: File /memories/a would be 12 bytes, over the limit of 10 bytes"
    )
    assert run(server, command="create", path="/memories/a", file_text="v1") == ok(
        "File created successfully at: /memories/a"
    )
    assert run(server, command="create", path="/memories/a", file_text="v2") == ok(
        "File created successfully at: /memories/a"
    )
    assert [r.content for r in server.history("/memories/a")] == ["v1", "v2"]
    assert run(server, command="create", path="/memories", file_text="x") == bad("Error: File /memories already exists")
    run(server, command="create", path="/memories/d/e", file_text="x")
    assert run(server, command="create", path="/memories/d", file_text="x") == bad(
        "Error: File /memories/d already exists"
    )
    assert run(server, command="create", path="/memories/a", file_text="x" * 11) == bad(
        "Error: File /memories/a would be 11 bytes, over the limit of 10 bytes"
    )
    default = MnemoMemoryToolServer(client)
    big = "x" * ((1 << 20) + 1)
    assert run(default, command="create", path="/memories/big", file_text=big) == bad(
        f"Error: File /memories/big would be {len(big)} bytes, over the limit of {1 << 20} bytes"
    )


# -- str_replace ---------------------------------------------------------------------------------------


def test_str_replace(client: MnemoClient, server: MnemoMemoryToolServer) -> None:
    text = "alpha\nbeta\ngamma\ndelta\nepsilon\nzeta\neta\n"
    run(server, command="create", path="/memories/s.txt", file_text=text)
    run(server, command="create", path="/memories/dir/x", file_text="x")
    assert run(server, command="str_replace", path="/memories/none", old_str="a", new_str="b") == bad(
        "Error: " + MISSING.format("/memories/none")
    )
    # a directory is not a file (the reference's text, with the `Error: ` prefix)
    assert run(server, command="str_replace", path="/memories/dir", old_str="a", new_str="b") == bad(
        "Error: The path /memories/dir is not a file."
    )
    assert run(server, command="str_replace", path="/memories", old_str="a", new_str="b") == bad(
        "Error: The path /memories is not a file."
    )
    assert run(server, command="str_replace", path="/memories/s.txt", old_str="", new_str="b") == bad(
        "Error: `old_str` must not be empty"
    )
    assert run(server, command="str_replace", path="/memories/s.txt", old_str="omega", new_str="b") == bad(
        "No replacement was performed, old_str `omega` did not appear verbatim in /memories/s.txt."
    )
    assert run(server, command="str_replace", path="/memories/s.txt", old_str="ta\n", new_str="b") == bad(
        "No replacement was performed. Multiple occurrences of old_str `ta\n` in lines: 2, 4, 6, 7. "
        "Please ensure it is unique"
    )
    assert run(server, command="str_replace", path="/memories/s.txt", old_str="gamma", new_str="GAMMA\nG2") == ok(
        EDITED + "     1\talpha\n     2\tbeta\n     3\tGAMMA\n     4\tG2\n     5\tdelta"
    )
    # new_str omitted deletes old_str
    assert run(server, command="str_replace", path="/memories/s.txt", old_str="zeta\n") == ok(
        EDITED + "     5\tdelta\n     6\tepsilon\n     7\teta\n     8\t"
    )
    rec = client.query(tags=("path:/memories/s.txt",))[0]
    assert rec.content == "alpha\nbeta\nGAMMA\nG2\ndelta\nepsilon\neta\n"
    assert rec.version == 3


def test_str_replace_snippet_counts_a_leading_empty_line(server: MnemoMemoryToolServer) -> None:
    text = "\n" + "".join(f"l{i}\n" for i in range(1, 8)) + "target\nl9\n"  # target is line 9
    run(server, command="create", path="/memories/blank.txt", file_text=text)
    assert run(server, command="str_replace", path="/memories/blank.txt", old_str="target", new_str="T") == ok(
        EDITED + "     7\tl6\n     8\tl7\n     9\tT\n    10\tl9\n    11\t"
    )


def test_str_replace_size_limit(client: MnemoClient) -> None:
    server = MnemoMemoryToolServer(client, max_file_bytes=8)
    run(server, command="create", path="/memories/s", file_text="abcd")
    assert run(server, command="str_replace", path="/memories/s", old_str="b", new_str="123456") == bad(
        "Error: File /memories/s would be 9 bytes, over the limit of 8 bytes"
    )
    assert run(server, command="insert", path="/memories/s", insert_line=0, insert_text="1234") == bad(
        "Error: File /memories/s would be 10 bytes, over the limit of 8 bytes"
    )
    assert [r.content for r in server.history("/memories/s")] == ["abcd"]


# -- insert --------------------------------------------------------------------------------------------


def test_insert(client: MnemoClient, server: MnemoMemoryToolServer) -> None:
    run(server, command="create", path="/memories/i.txt", file_text="one\ntwo")
    run(server, command="create", path="/memories/d/x", file_text="")
    assert run(server, command="insert", path="/memories/none", insert_line=0, insert_text="x") == bad(
        "Error: The path /memories/none does not exist"
    )
    assert run(server, command="insert", path="/memories/d", insert_line=0, insert_text="x") == bad(
        "Error: The path /memories/d is not a file."
    )
    assert run(server, command="insert", path="/memories/", insert_line=0, insert_text="x") == bad(
        "Error: The path /memories/ is not a file."
    )
    assert run(server, command="insert", path="/memories/i.txt", insert_line=3, insert_text="x") == bad(
        "Error: Invalid `insert_line` parameter: 3. It should be within the range of lines of the file: [0, 2]"
    )
    assert run(server, command="insert", path="/memories/i.txt", insert_line=-1, insert_text="x") == bad(
        "Error: Invalid `insert_line` parameter: -1. It should be within the range of lines of the file: [0, 2]"
    )
    assert run(server, command="insert", path="/memories/i.txt", insert_line=1, insert_text="mid\n") == ok(
        "The file /memories/i.txt has been edited."
    )
    assert run(server, command="insert", path="/memories/d/x", insert_line=0, insert_text="first") == ok(
        "The file /memories/d/x has been edited."
    )
    assert client.query(tags=("path:/memories/i.txt",))[0].content == "one\nmid\ntwo\n"
    assert client.query(tags=("path:/memories/d/x",))[0].content == "first\n"
    assert run(server, command="insert", path="/memories/d/x", insert_line=2, insert_text="x") == bad(
        "Error: Invalid `insert_line` parameter: 2. It should be within the range of lines of the file: [0, 1]"
    )


# -- delete --------------------------------------------------------------------------------------------


def test_delete(client: MnemoClient, server: MnemoMemoryToolServer, db: str) -> None:
    for path in ["/memories", "/memories/", "/memories/.", "/memories//./"]:
        assert run(server, command="delete", path=path) == bad("Error: Cannot delete the /memories directory itself")
    assert run(server, command="delete", path="/memories/none") == bad("Error: The path /memories/none does not exist")
    marker = "ERASE-ME-7f3a9c"
    run(server, command="create", path="/memories/keep", file_text="kept")
    run(server, command="create", path="/memories/f", file_text=marker + " file")
    for i in range(50):
        run(server, command="create", path=f"/memories/d/sub{i % 3}/n{i}", file_text=f"{marker} {i}")
    assert run(server, command="delete", path="/memories/f") == ok("Successfully deleted /memories/f")
    frames = count_frames(db)
    head = client.head[0]
    assert run(server, command="delete", path="/memories/d/") == ok("Successfully deleted /memories/d/")
    assert count_frames(db) == frames + 1
    assert client.head[0] == head + 1  # one forget entry names all 50 records
    assert tagged_paths(client) == ["/memories/keep"]
    assert run(server, command="view", path="/memories/d") == bad(MISSING.format("/memories/d"))
    # forgetting erased the content: no file (no table) of the database holds it
    for name, data in stored(db).items():
        assert marker.encode() not in data, name
    assert client.verify().ok


# -- rename --------------------------------------------------------------------------------------------


def test_rename_errors_in_order(client: MnemoClient, server: MnemoMemoryToolServer) -> None:
    run(server, command="create", path="/memories/a.txt", file_text="a")
    run(server, command="create", path="/memories/d/x.txt", file_text="x")
    run(server, command="create", path="/memories/d/e/y.txt", file_text="y")

    def rename(old: str, new: str) -> CommandResult:
        return run(server, command="rename", old_path=old, new_path=new)

    assert rename("/memories", "/memories/z") == bad("Error: Cannot rename the /memories directory itself")
    assert rename("/memories/", "/memories/a.txt") == bad("Error: Cannot rename the /memories directory itself")
    assert rename("/memories/a.txt", "/memories/d") == bad("Error: The destination /memories/d already exists")
    assert rename("/memories/d", "/memories/a.txt") == bad("Error: The destination /memories/a.txt already exists")
    assert rename("/memories/d", "/memories/") == bad("Error: The destination /memories/ already exists")
    assert rename("/memories/d", "/memories/d/e") == bad("Error: The destination /memories/d/e already exists")
    assert rename("/memories/none", "/memories/a.txt") == bad("Error: The destination /memories/a.txt already exists")
    assert rename("/memories/none", "/memories/new") == bad("Error: The path /memories/none does not exist")
    assert rename("/memories/d", "/memories/d/f/g") == bad("Error: Cannot move /memories/d into itself")
    assert rename("/memories/a.txt", "/memories/a.txt/b") == bad("Error: Cannot move /memories/a.txt into itself")
    assert rename("/memories/d", "/memories/a.txt/d") == bad(
        "Error: Cannot create /memories/a.txt/d: /memories/a.txt is a file"
    )
    assert rename("/memories/d/x.txt", "/memories/a.txt/q/x.txt") == bad(
        "Error: Cannot create /memories/a.txt/q/x.txt: /memories/a.txt is a file"
    )
    assert tagged_paths(client) == ["/memories/a.txt", "/memories/d/e/y.txt", "/memories/d/x.txt"]


def test_rename_file_keeps_id_and_history(client: MnemoClient, server: MnemoMemoryToolServer) -> None:
    run(server, command="create", path="/memories/a.txt", file_text="v1")
    run(server, command="str_replace", path="/memories/a.txt", old_str="v1", new_str="v2")
    rec_id = client.list_records(tags=("path:/memories/a.txt",))[0].id
    assert run(server, command="rename", old_path="/memories/a.txt", new_path="/memories/archive/b.txt") == ok(
        "Successfully renamed /memories/a.txt to /memories/archive/b.txt"
    )
    info = client.list_records(tags=("path:/memories/archive/b.txt",))[0]
    assert info.id == rec_id
    assert info.version == 3
    history = server.history("/memories/archive//b.txt")
    assert [(r.version, r.content) for r in history] == [(1, "v1"), (2, "v2"), (3, "v2")]
    assert [r.tags for r in history] == [
        ("memorytool", "path:/memories/a.txt"),
        ("memorytool", "path:/memories/a.txt"),
        ("memorytool", "path:/memories/archive/b.txt"),
    ]
    with pytest.raises(NotFound):
        server.history("/memories/a.txt")
    with pytest.raises(InvalidInput):
        server.history("/memories/../a.txt")


def test_rename_directory_is_one_commit(client: MnemoClient, server: MnemoMemoryToolServer, db: str) -> None:
    with client.transaction():
        for i in range(300):
            client.remember(f"n{i}", tags=("memorytool", f"path:/memories/src/s{i % 4}/f{i}"))
    client.remember("other", tags=("memorytool", "path:/memories/srcX"), metadata={"k": 1})
    client.remember("extra tags", tags=("memorytool", "path:/memories/src/t", "keep-me"))
    frames = count_frames(db)
    assert run(server, command="rename", old_path="/memories/src", new_path="/memories/dst/inner") == ok(
        "Successfully renamed /memories/src to /memories/dst/inner"
    )
    assert count_frames(db) == frames + 1
    paths = tagged_paths(client)
    assert len(paths) == 302
    assert "/memories/srcX" in paths
    assert all(p.startswith("/memories/dst/inner/") for p in paths if p != "/memories/srcX")
    moved = client.list_records(tags=("keep-me",))[0]
    assert moved.tags == ("keep-me", "memorytool", "path:/memories/dst/inner/t")
    assert moved.version == 2


def test_failed_directory_rename_writes_nothing(
    client: MnemoClient, server: MnemoMemoryToolServer, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(10):
        run(server, command="create", path=f"/memories/src/f{i}", file_text=str(i))
    before = tagged_paths(client)
    head, size = client.head, snapshot(db)
    real_update = client.update
    calls = {"n": 0}

    def flaky_update(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 6:
            raise OSError("disk went away")
        return real_update(*args, **kwargs)

    monkeypatch.setattr(client, "update", flaky_update)
    result = run(server, command="rename", old_path="/memories/src", new_path="/memories/dst")
    assert result == bad("Error: Internal error (OSError)")
    assert tagged_paths(client) == before
    assert client.head == head
    assert snapshot(db) == size


def test_the_stores_not_found_inside_a_command_is_an_error_result(
    client: MnemoClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command holds the writer lock from its listing to its last read, so a file it found is there
    when it reads it; should the store still answer NotFound, that is an error result in the store's
    words, not a crash and not a success."""
    server = MnemoMemoryToolServer(client)
    assert not run(server, command="create", path="/memories/a.md", file_text="x").is_error

    def gone(rec_id: str, *args: Any, **kwargs: Any) -> Any:
        raise NotFound(f"record {rec_id} not found")

    monkeypatch.setattr(client, "get", gone)
    result = run(server, command="view", path="/memories/a.md")
    assert result.is_error is True
    assert result.text.startswith("Error: record ") and result.text.endswith(" not found")


@pytest.mark.parametrize("error", [InvalidInput, Conflict])
def test_a_store_error_about_the_command_is_an_error_result_in_its_words(
    client: MnemoClient, monkeypatch: pytest.MonkeyPatch, error: type[MnemoError]
) -> None:
    """A refused value or a lost race is the command's error result, the store's message after "Error: ",
    marked as an error (a model must not take it for content)."""
    server = MnemoMemoryToolServer(client)
    assert not run(server, command="create", path="/memories/a.md", file_text="x").is_error

    def failing(rec_id: str, *args: Any, **kwargs: Any) -> Any:
        raise error("the store says no")

    monkeypatch.setattr(client, "get", failing)
    assert run(server, command="view", path="/memories/a.md") == bad("Error: the store says no")


class _OtherFailure(MnemoError):
    pass


@pytest.mark.parametrize("error", [*(kind for kind, _ in STORE_FAILURES), _OtherFailure])
def test_a_failure_of_the_store_itself_is_told_as_what_the_model_can_do_and_logged_in_its_words(
    client: MnemoClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, error: type[MnemoError]
) -> None:
    """A damaged store, a lost database server, a failed write: the store's words are the operator's (they
    may name the database's path or server), so they go to the log, and the model gets its kind's text."""
    server = MnemoMemoryToolServer(client)
    assert not run(server, command="create", path="/memories/a.md", file_text="x").is_error

    def failing(rec_id: str, *args: Any, **kwargs: Any) -> Any:
        raise error("/srv/secret/memory.db: the store says no")

    monkeypatch.setattr(client, "get", failing)
    told = dict(STORE_FAILURES).get(error, "Error: The memory store failed (_OtherFailure); the server's log says why")
    with caplog.at_level(logging.WARNING, "mnemo.tools"):
        assert run(server, command="view", path="/memories/a.md") == bad(told)
    said = f"memory tool command failed: {error.__name__}: /srv/secret/memory.db: the store says no"
    assert caplog.messages == [said]


def test_lock_timeout_is_an_error_result(client: MnemoClient, monkeypatch: pytest.MonkeyPatch) -> None:
    server = MnemoMemoryToolServer(client)

    def busy() -> Any:
        raise LockTimeout("writer lock held")

    monkeypatch.setattr(client, "transaction", busy)
    assert run(server, command="create", path="/memories/a", file_text="x") == bad(
        "Error: The memory store is busy (writer lock timeout); try again"
    )


# -- permissions ---------------------------------------------------------------------------------------


def test_permissions(client: MnemoClient, db: str) -> None:
    owner = MnemoMemoryToolServer(client)
    run(owner, command="create", path="/memories/secret.txt", file_text="owner's")
    with MnemoClient(db, "agent-2", durability="none") as other_client:
        other = MnemoMemoryToolServer(other_client, scope="agent:agent-1")
        denied = "Error: Permission denied: agent-2 may not {} in scope agent:agent-1"
        # input and path checks come first; then the permission check, before anything is looked up
        assert run(other, command="view") == bad("Error: Missing required parameter `path` for command `view`")
        assert run(other, command="view", path="/memories/../x") == bad(
            "Error: Path /memories/../x would escape /memories directory"
        )
        assert run(other, command="view", path="/memories") == bad(denied.format("read"))
        assert run(other, command="view", path="/memories/secret.txt") == bad(denied.format("read"))
        assert run(other, command="view", path="/memories/none") == bad(denied.format("read"))
        assert run(other, command="create", path="/memories/secret.txt", file_text="x") == bad(denied.format("write"))
        assert run(other, command="delete", path="/memories") == bad(denied.format("forget"))
        client.grant("agent-2", "agent:agent-1", ["read"])
        assert run(other, command="view", path="/memories/secret.txt") == ok(
            FILE_HEADER.format("/memories/secret.txt") + "\n     1\towner's"
        )
        for tool_input, perm in [
            ({"command": "create", "path": "/memories/n", "file_text": "x"}, "write"),
            (
                {"command": "str_replace", "path": "/memories/secret.txt", "old_str": "o", "new_str": "0"},
                "write",
            ),
            (
                {"command": "insert", "path": "/memories/secret.txt", "insert_line": 0, "insert_text": "x"},
                "write",
            ),
            ({"command": "rename", "old_path": "/memories/secret.txt", "new_path": "/memories/s2"}, "write"),
            ({"command": "delete", "path": "/memories/secret.txt"}, "forget"),
        ]:
            assert other.execute(tool_input) == bad(denied.format(perm))
        client.grant("agent-2", "agent:agent-1", ["write"])
        assert (
            run(other, command="insert", path="/memories/secret.txt", insert_line=0, insert_text="hi").is_error is False
        )
        assert run(other, command="delete", path="/memories/secret.txt") == bad(denied.format("forget"))
        client.grant("agent-2", "agent:agent-1", ["forget"])
        assert run(other, command="delete", path="/memories/secret.txt") == ok(
            "Successfully deleted /memories/secret.txt"
        )


def test_readonly_client_views(client: MnemoClient, db: str) -> None:
    run(MnemoMemoryToolServer(client), command="create", path="/memories/a", file_text="x")
    client.close()
    with MnemoClient(db, "agent-1", readonly=True) as ro:
        server = MnemoMemoryToolServer(ro)
        assert run(server, command="view", path="/memories/a") == ok(FILE_HEADER.format("/memories/a") + "\n     1\tx")
        assert run(server, command="create", path="/memories/b", file_text="x") == bad(
            "Error: The memory store is read-only"
        )


def test_scopes_are_separate(client: MnemoClient) -> None:
    mine = MnemoMemoryToolServer(client)
    team = MnemoMemoryToolServer(client, scope="team:red")
    run(mine, command="create", path="/memories/a", file_text="home")
    assert run(team, command="view", path="/memories/a") == bad(MISSING.format("/memories/a"))
    assert run(team, command="create", path="/memories/a", file_text="team").is_error is False
    assert run(team, command="view", path="/memories/a").text.endswith("\tteam")
    assert run(mine, command="view", path="/memories/a").text.endswith("\thome")


# -- concurrency ---------------------------------------------------------------------------------------

WORKER = textwrap.dedent(
    """
    import sys
    from mnemo import MnemoClient
    from mnemo.tools import MnemoMemoryToolServer
    db, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with MnemoClient(db, "agent-1", durability="none") as client:
        server = MnemoMemoryToolServer(client)
        for i in range(n):
            r = server.execute({"command": "insert", "path": "/memories/shared.txt", "insert_line": 0,
                                "insert_text": f"{name}-{i}"})
            assert not r.is_error, r
            r = server.execute({"command": "str_replace", "path": "/memories/shared.txt",
                                "old_str": "counter", "new_str": "counter"})
            assert not r.is_error, r
    """
)


def test_two_processes_never_lose_an_update(client: MnemoClient, server: MnemoMemoryToolServer, db: str) -> None:
    run(server, command="create", path="/memories/shared.txt", file_text="counter\n")
    root = str(ROOT)
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    n = 40
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, db, name, str(n)], env=env, stderr=subprocess.PIPE)
        for name in ("p", "q")
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    content = client.query(tags=("path:/memories/shared.txt",))[0].content
    assert isinstance(content, str)
    lines = content.split("\n")
    assert sorted(lines) == sorted(["", "counter"] + [f"{name}-{i}" for name in "pq" for i in range(n)])
    assert len(server.history("/memories/shared.txt")) == 1 + 4 * n


# -- nothing the model sends crashes the server ------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)
FIELD_VALUES = st.one_of(
    JSON,
    st.sampled_from(["/memories", "/memories/a", "/memories/a/b", "/memories/../a", "/memoriesX", "\ud800", ""]),
    st.integers(-3, 5),
    st.lists(st.integers(-3, 5), min_size=0, max_size=3),
)
FUZZ_INPUTS = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {"command": st.sampled_from(["view", "create", "str_replace", "insert", "delete", "rename", "x", None])},
        optional={
            name: FIELD_VALUES
            for name in (
                "path",
                "file_text",
                "old_str",
                "new_str",
                "insert_line",
                "insert_text",
                "view_range",
                "old_path",
                "new_path",
            )
        },
    ),
)


def test_fuzzed_inputs_never_crash(client: MnemoClient, server: MnemoMemoryToolServer) -> None:
    run(server, command="create", path="/memories/a/b", file_text="seed\n")

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(FUZZ_INPUTS)
    def check(tool_input: Any) -> None:
        block = server.handle({"type": "tool_use", "id": "toolu_fuzz", "name": "memory", "input": tool_input})
        assert set(block) <= {"type", "tool_use_id", "content", "is_error"}
        assert block["type"] == "tool_result" and block["tool_use_id"] == "toolu_fuzz"
        assert isinstance(block["content"], str)
        assert "Internal error" not in block["content"]
        assert block.get("is_error", True) is True or not block["content"].startswith("Error:")

    check()
    assert client.verify().ok
    for info in client.list_records(tags=("memorytool",)):
        (tag,) = [t for t in info.tags if t.startswith("path:")]
        assert tag.startswith("path:/memories/")
        assert ".." not in tag.split("/")


def test_handle_accepts_sdk_blocks(server: MnemoMemoryToolServer) -> None:
    types = pytest.importorskip("anthropic.types.beta")
    block = types.BetaToolUseBlock(
        type="tool_use", id="toolu_sdk", name="memory", input={"command": "view", "path": "/memories"}
    )
    assert server.handle(block) == {
        "type": "tool_result",
        "tool_use_id": "toolu_sdk",
        "content": ROOT_HEADER.format("/memories") + "\n0B\t/memories",
    }
