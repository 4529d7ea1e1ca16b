"""`mnemo mcp` over stdio, driven by the MCP SDK's own client against a spawned server process.

What an MCP client sees must be what the memory tool answers: every result is compared, text and error
flag, with `MnemoMemoryToolServer.handle()` running the same sequence on a second database.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from helpers.backends import snapshot, state  # noqa: E402
from helpers.mcp_procs import run_async, stdio_session, text_of  # noqa: E402

from mnemo import MnemoClient  # noqa: E402
from mnemo.cli import main as cli_main  # noqa: E402
from mnemo.storage.contract import shown_name  # noqa: E402
from mnemo.tools import MnemoMemoryToolServer  # noqa: E402

AGENT = "agent-1"

# name -> (argument names, required, readOnlyHint, destructiveHint, idempotentHint)
EXPECTED_TOOLS: dict[str, tuple[tuple[str, ...], tuple[str, ...], bool, bool, bool]] = {
    "memory_view": (("path", "view_range"), ("path",), True, False, True),
    "memory_create": (("path", "file_text"), ("path", "file_text"), False, False, True),
    "memory_str_replace": (("path", "old_str", "new_str"), ("path", "old_str"), False, False, False),
    "memory_insert": (
        ("path", "insert_line", "insert_text"), ("path", "insert_line", "insert_text"), False, False, False
    ),
    "memory_delete": (("path",), ("path",), False, True, True),
    "memory_rename": (("old_path", "new_path"), ("old_path", "new_path"), False, False, True),
    "memory_search": (("query", "path", "limit", "mode"), ("query",), True, False, True),
    "memory_history": (("path",), ("path",), True, False, True),
    "memory_verify": ((), (), True, False, True),
}
COMMANDS = {
    "memory_view": "view",
    "memory_create": "create",
    "memory_str_replace": "str_replace",
    "memory_insert": "insert",
    "memory_delete": "delete",
    "memory_rename": "rename",
}
LONG = "\n".join(f"line {i:05d} " + "x" * 60 for i in range(400))

# Every command's success and error paths, traversal, bad and missing arguments, nulls, extra keys.
SEQUENCE: list[tuple[str, dict[str, Any]]] = [
    ("memory_view", {"path": "/memories"}),
    ("memory_create", {"path": "/memories/notes.md", "file_text": "alpha\nbeta\ngamma\n"}),
    ("memory_create", {"path": "/memories/notes.md", "file_text": "again"}),
    ("memory_create", {"path": "/memories/notes.md/under", "file_text": "x"}),
    ("memory_create", {"path": "/memories/dir/sub/é ü.txt", "file_text": "ünïcødé ✓\n"}),
    ("memory_create", {"path": "/memories/dir/.hidden", "file_text": "h"}),
    ("memory_create", {"path": "/memories/long.txt", "file_text": LONG}),
    ("memory_view", {"path": "/memories/"}),
    ("memory_view", {"path": "/memories/dir"}),
    ("memory_view", {"path": "/memories/notes.md"}),
    ("memory_view", {"path": "/memories/notes.md", "view_range": [2, -1]}),
    ("memory_view", {"path": "/memories/notes.md", "view_range": [3, 2]}),
    ("memory_view", {"path": "/memories/notes.md", "view_range": [1, -5]}),
    ("memory_view", {"path": "/memories/notes.md", "view_range": [1]}),
    ("memory_view", {"path": "/memories/notes.md", "view_range": None}),
    ("memory_view", {"path": "/memories/long.txt"}),
    ("memory_view", {"path": "/memories/missing"}),
    ("memory_view", {"path": "/memories/notes.md", "command": "delete"}),
    ("memory_str_replace", {"path": "/memories/notes.md", "old_str": "beta", "new_str": "BETA"}),
    ("memory_str_replace", {"path": "/memories/notes.md", "old_str": "zzz", "new_str": "y"}),
    ("memory_str_replace", {"path": "/memories/notes.md", "old_str": "a"}),
    ("memory_str_replace", {"path": "/memories/notes.md", "old_str": ""}),
    ("memory_str_replace", {"path": "/memories/notes.md", "old_str": "gamma\n", "new_str": None}),
    ("memory_str_replace", {"path": "/memories/dir", "old_str": "x", "new_str": "y"}),
    ("memory_insert", {"path": "/memories/notes.md", "insert_line": 0, "insert_text": "top\n"}),
    ("memory_insert", {"path": "/memories/notes.md", "insert_line": 99, "insert_text": "x"}),
    ("memory_insert", {"path": "/memories/notes.md", "insert_line": "1", "insert_text": "x"}),
    ("memory_insert", {"path": "/memories/notes.md", "insert_line": True, "insert_text": "x"}),
    ("memory_insert", {"path": "/memories/missing", "insert_line": 0, "insert_text": "x"}),
    ("memory_insert", {"path": "/memories/notes.md", "insert_text": "x"}),
    ("memory_view", {"path": "/memories/notes.md"}),
    ("memory_rename", {"old_path": "/memories/notes.md", "new_path": "/memories/archive/notes.md"}),
    ("memory_rename", {"old_path": "/memories/notes.md", "new_path": "/memories/other.md"}),
    ("memory_rename", {"old_path": "/memories/dir", "new_path": "/memories/dir/inner"}),
    ("memory_rename", {"old_path": "/memories/dir", "new_path": "/memories/archive/notes.md"}),
    ("memory_rename", {"old_path": "/memories", "new_path": "/memories/x"}),
    ("memory_rename", {"old_path": "/memories/dir", "new_path": "/memories/moved"}),
    ("memory_view", {"path": "/memories"}),
    ("memory_delete", {"path": "/memories/moved"}),
    ("memory_delete", {"path": "/memories/moved"}),
    ("memory_delete", {"path": "/memories"}),
    # Paths that try to leave /memories, and paths that are not paths.
    ("memory_view", {"path": "/memories/../etc/passwd"}),
    ("memory_view", {"path": "/memories/%2e%2e/secret"}),
    ("memory_view", {"path": "/memories\\..\\x"}),
    ("memory_view", {"path": "/etc/passwd"}),
    ("memory_view", {"path": "/memoriesX/a"}),
    ("memory_create", {"path": "/memories/a\x00b", "file_text": "x"}),
    ("memory_create", {"path": "/memories/../../escape.txt", "file_text": "x"}),
    ("memory_rename", {"old_path": "/memories/long.txt", "new_path": "/memories/../long.txt"}),
    ("memory_delete", {"path": "/memories/%2E%2E"}),
    ("memory_view", {"path": 5}),
    ("memory_view", {}),
    ("memory_create", {"path": "/memories/x.txt"}),
    ("memory_create", {"path": "/memories/x.txt", "file_text": ["not", "text"]}),
    ("memory_view", {"path": "/memories"}),
]


def reference_input(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """The memory-tool input the MCP call stands for: the tool names the command, whatever the arguments say."""
    return {**{k: v for k, v in args.items() if k != "command"}, "command": COMMANDS[tool]}


def test_tools_their_schemas_and_every_result_match_the_memory_tool(
    db: str, new_db: Callable[[], str], tmp_path: Path
) -> None:
    reference_db = new_db()

    async def body() -> tuple[Any, list[Any], list[tuple[str, bool]]]:
        with (tmp_path / "stderr.txt").open("w") as errlog:
            async with stdio_session("--db", str(db), "--agent", AGENT, errlog=errlog) as session:
                init, listed = await session.initialize(), (await session.list_tools()).tools
                results = []
                for tool, args in SEQUENCE:
                    result = await session.call_tool(tool, args)
                    results.append((text_of(result), bool(result.is_error)))
                return init, listed, results

    init, listed, got = run_async(body)
    assert init.server_info.name == "mnemo"
    assert "memory_view" in init.instructions and "/memories" in init.instructions
    assert [t.name for t in listed] == list(EXPECTED_TOOLS)
    for tool in listed:
        names, required, read_only, destructive, idempotent = EXPECTED_TOOLS[tool.name]
        schema = tool.input_schema
        assert schema["type"] == "object"
        assert tuple(schema["properties"]) == names
        assert tuple(schema["required"]) == required
        assert schema["additionalProperties"] is False
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is read_only
        assert tool.annotations.destructive_hint is destructive
        assert tool.annotations.idempotent_hint is idempotent
        assert tool.annotations.open_world_hint is False
    by_name = {t.name: t for t in listed}
    assert by_name["memory_view"].input_schema["properties"]["view_range"] == {
        "type": "array",
        "items": {"type": "integer"},
        "minItems": 2,
        "maxItems": 2,
        "description": "Lines to show, [start, end], numbered from 1; end -1 means to the end of the file.",
    }
    assert by_name["memory_insert"].input_schema["properties"]["insert_line"]["type"] == "integer"
    strings = [("memory_create", "file_text"), ("memory_str_replace", "new_str"), ("memory_rename", "new_path")]
    for name, field in strings:
        assert by_name[name].input_schema["properties"][field]["type"] == "string"
    assert "start of every task" in (by_name["memory_view"].description or "")
    assert "/memories" in (by_name["memory_create"].description or "")
    assert "for good" in (by_name["memory_delete"].description or "")
    # What is served is said on stderr, never on stdout (the protocol's: a stray line would break it).
    stderr = (tmp_path / "stderr.txt").read_text()
    assert f"mnemo mcp: serving {shown_name(db)} as agent {AGENT}, scope agent:{AGENT}, over stdio\n" in stderr

    # Every result, text and error flag, is what the memory tool answers to the same sequence.
    expected = []
    with MnemoClient(reference_db, AGENT, durability="none") as client:
        server = MnemoMemoryToolServer(client)
        for i, (tool, args) in enumerate(SEQUENCE):
            tool_use = {"type": "tool_use", "id": f"t{i}", "name": "memory", "input": reference_input(tool, args)}
            block = server.handle(tool_use)
            expected.append((block["content"], block.get("is_error", False)))
    for (tool, args), g, e in zip(SEQUENCE, got, expected, strict=True):
        assert g == e, (tool, args)
    # Not vacuous: the sequence reached the memory tool's own texts, errors included.
    assert got[1] == ("File created successfully at: /memories/notes.md", False)
    assert got[41] == ("Error: Path /memories/../etc/passwd would escape /memories directory", True)
    assert got[26] == ("Error: Parameter `insert_line` of command `insert` must be an integer", True)
    assert got[51] == ("Error: Missing required parameter `path` for command `view`", True)
    assert got[17][0].startswith("Here's the content of /memories/notes.md")
    assert sum(is_error for _, is_error in got) >= 25
    # The two stores hold the same files with the same content.
    with MnemoClient(db, AGENT) as a, MnemoClient(reference_db, AGENT) as b:
        assert sorted((r.tags, r.content) for r in a.query()) == sorted((r.tags, r.content) for r in b.query())


def test_traversal_and_bad_input_change_nothing(db: str) -> None:
    with MnemoClient(db, AGENT) as client:
        MnemoMemoryToolServer(client).execute({"command": "create", "path": "/memories/a.txt", "file_text": "a\n"})
    before = snapshot(db)
    attacks: list[tuple[str, dict[str, Any]]] = [
        ("memory_create", {"path": "/memories/../../tmp/x", "file_text": "x"}),
        ("memory_create", {"path": "/memories/%2e%2e/x", "file_text": "x"}),
        ("memory_create", {"path": "/memories/x\u2028y", "file_text": "x"}),
        ("memory_create", {"path": "/memories/" + "a" * 2000, "file_text": "x"}),
        ("memory_create", {"path": "/memories/big", "file_text": "x" * ((1 << 20) + 1)}),
        ("memory_str_replace", {"path": "/memories/a.txt", "old_str": 1, "new_str": "b"}),
        ("memory_insert", {"path": "/memories/a.txt", "insert_line": -1, "insert_text": "x"}),
        ("memory_insert", {"path": "/memories/a.txt", "insert_line": 1.5, "insert_text": "x"}),
        ("memory_rename", {"old_path": "/memories/a.txt", "new_path": "/tmp/a.txt"}),
        ("memory_delete", {"path": "/memories/../memories/a.txt"}),
        ("memory_delete", {"path": ["/memories/a.txt"]}),
        ("memory_history", {"path": "/memories/../x"}),
        ("memory_history", {"path": 3}),
        ("memory_history", {}),
        ("memory_nonexistent", {"path": "/memories/a.txt"}),
    ]

    async def body() -> list[tuple[str, bool]]:
        async with stdio_session("--db", str(db), "--agent", AGENT) as session:
            return [(text_of(r), bool(r.is_error)) for r in [await session.call_tool(t, a) for t, a in attacks]]

    results = run_async(body)
    assert all(is_error for _, is_error in results), results
    assert [text for text, _ in results] == [
        "Error: Path /memories/../../tmp/x would escape /memories directory",
        "Error: Path /memories/%2e%2e/x would escape /memories directory",
        "Error: Invalid path: " + repr("/memories/x\u2028y"),
        f"Error: Invalid path: {'/memories/' + 'a' * 2000!r}",
        f"Error: File /memories/big would be {(1 << 20) + 1} bytes, over the limit of {1 << 20} bytes",
        "Error: Parameter `old_str` of command `str_replace` must be a string",
        "Error: Invalid `insert_line` parameter: -1. It should be within the range of lines of the file: [0, 1]",
        "Error: Parameter `insert_line` of command `insert` must be an integer",
        "Error: Path must start with /memories, got: /tmp/a.txt",
        "Error: Path /memories/../memories/a.txt would escape /memories directory",
        "Error: Parameter `path` of command `delete` must be a string",
        "Error: Path /memories/../x would escape /memories directory",
        "Error: Parameter `path` of tool `memory_history` must be a string",
        "Error: Missing required parameter `path` for tool `memory_history`",
        "Error: Unknown tool: memory_nonexistent",
    ]
    assert snapshot(db) == before


def test_history_and_verify(db: str) -> None:

    async def body() -> list[tuple[str, bool]]:
        out = []
        async with stdio_session("--db", str(db), "--agent", AGENT) as session:
            for tool, args in [
                ("memory_create", {"path": "/memories/p.md", "file_text": "one\n"}),
                ("memory_str_replace", {"path": "/memories/p.md", "old_str": "one", "new_str": "two"}),
                ("memory_rename", {"old_path": "/memories/p.md", "new_path": "/memories/q.md"}),
                ("memory_history", {"path": "/memories/q.md"}),
                ("memory_history", {"path": "/memories/p.md"}),
                ("memory_verify", {}),
                ("memory_delete", {"path": "/memories/q.md"}),
                ("memory_history", {"path": "/memories/q.md"}),
                ("memory_verify", {}),
            ]:
                r = await session.call_tool(tool, args)
                out.append((text_of(r), bool(r.is_error)))
        return out

    results = run_async(body)
    history, old_path, verify, _, gone, verify_after = results[3:]
    with MnemoClient(db, AGENT, readonly=True) as reader:  # the owner: the head is for admins on *
        head_seq, head_hash = reader.head
    lines = history[0].split("\n")
    assert history[1] is False
    assert lines[0] == "History of /memories/q.md: 3 versions, oldest first"
    assert lines[1].startswith("--- version 1, ") and lines[1].endswith(f", by {AGENT}, at /memories/p.md (seq 1)")
    assert lines[2:4] == ["     1\tone", "     2\t"]
    assert lines[4].endswith(f", by {AGENT}, at /memories/p.md (seq 2)")
    assert lines[5:7] == ["     1\ttwo", "     2\t"]
    assert lines[7].startswith("--- version 3, ") and lines[7].endswith(f", by {AGENT}, at /memories/q.md (seq 3)")
    assert old_path == ("Error: The path /memories/p.md does not exist", True)
    assert verify[1] is False
    assert re.fullmatch(
        "OK: the chain is intact: 4 entries verified\n"
        "head: 3:[0-9a-f]{64}\n"
        "erased versions: 0; signed checkpoints verified: 0",
        verify[0],
    )
    assert gone == ("Error: The path /memories/q.md does not exist", True)
    assert verify_after == (
        "OK: the chain is intact: 5 entries verified\n"
        f"head: {head_seq}:{head_hash}\n"
        "erased versions: 3; signed checkpoints verified: 0",
        False,
    )


def test_read_only_lists_no_write_tool_and_refuses_them(db: str) -> None:
    with MnemoClient(db, AGENT) as client:
        MnemoMemoryToolServer(client).execute({"command": "create", "path": "/memories/a.txt", "file_text": "kept\n"})
    before = state(db)

    async def body() -> tuple[Any, list[str], list[tuple[str, bool]]]:
        async with stdio_session("--db", str(db), "--agent", AGENT, "--read-only") as session:
            init = await session.initialize()
            names = [t.name for t in (await session.list_tools()).tools]
            out = []
            for tool, args in [
                ("memory_create", {"path": "/memories/b.txt", "file_text": "x"}),
                ("memory_str_replace", {"path": "/memories/a.txt", "old_str": "kept", "new_str": "gone"}),
                ("memory_insert", {"path": "/memories/a.txt", "insert_line": 0, "insert_text": "x"}),
                ("memory_delete", {"path": "/memories/a.txt"}),
                ("memory_rename", {"old_path": "/memories/a.txt", "new_path": "/memories/b.txt"}),
                ("memory_view", {"path": "/memories/a.txt"}),
                ("memory_history", {"path": "/memories/a.txt"}),
                ("memory_verify", {}),
            ]:
                r = await session.call_tool(tool, args)
                out.append((text_of(r), bool(r.is_error)))
            return init, names, out

    init, names, results = run_async(body)
    assert names == ["memory_view", "memory_search", "memory_history", "memory_verify"]
    assert "cannot change memory" in init.instructions
    assert results[:5] == [
        ("Error: Unknown tool: memory_create", True),
        ("Error: Unknown tool: memory_str_replace", True),
        ("Error: Unknown tool: memory_insert", True),
        ("Error: Unknown tool: memory_delete", True),
        ("Error: Unknown tool: memory_rename", True),
    ]
    assert results[5] == ("Here's the content of /memories/a.txt with line numbers:\n     1\tkept\n     2\t", False)
    assert results[6][0].startswith("History of /memories/a.txt: 1 version, oldest first\n")
    assert results[7][0].startswith("OK: the chain is intact: 2 entries verified\n")
    assert state(db) == before


def test_scope_and_its_permission_errors(db: str) -> None:
    with MnemoClient(db, "owner") as owner:
        owner.grant(AGENT, "team:notes", ["read"])

    async def body() -> list[tuple[str, bool]]:
        out = []
        async with stdio_session("--db", str(db), "--agent", AGENT, "--scope", "team:notes") as session:
            for tool, args in [
                ("memory_view", {"path": "/memories"}),
                ("memory_create", {"path": "/memories/a.txt", "file_text": "x"}),
                ("memory_history", {"path": "/memories/a.txt"}),
            ]:
                r = await session.call_tool(tool, args)
                out.append((text_of(r), bool(r.is_error)))
        return out

    assert run_async(body) == [
        ("Here're the files and directories up to 2 levels deep in /memories, excluding hidden items and "
         "node_modules:\n0B\t/memories", False),
        (f"Error: Permission denied: {AGENT} may not write in scope team:notes", True),
        ("Error: The path /memories/a.txt does not exist", True),
    ]


def test_defaults_db_in_the_data_directory_and_agent_from_the_environment(tmp_path: Path) -> None:
    data = tmp_path / "xdg-data"
    env = {"XDG_DATA_HOME": str(data), "MNEMO_AGENT": "env-agent", "HOME": str(tmp_path / "home")}

    async def body() -> str:
        with (tmp_path / "stderr.txt").open("w") as errlog:
            async with stdio_session(env=env, errlog=errlog) as session:
                r = await session.call_tool("memory_create", {"path": "/memories/x.md", "file_text": "x"})
                return text_of(r)

    assert run_async(body) == "File created successfully at: /memories/x.md"
    db = data / "mnemo" / "memory.mnemo.db"
    assert oct(db.parent.stat().st_mode & 0o777) == oct(0o700)
    with MnemoClient(db, "env-agent") as client:
        assert [r.scope for r in client.query()] == ["agent:env-agent"]
    stderr = (tmp_path / "stderr.txt").read_text()
    assert f"serving {db} as agent env-agent, scope agent:env-agent, over stdio" in stderr


def test_mnemo_ls_after_mnemo_mcp_alone_shows_what_the_client_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The newcomer's path: `claude mcp add mnemo -- mnemo mcp` (no --db, no --agent), Claude writes a
    memory, then `mnemo ls` and `mnemo cat PATH` with no database named show it."""
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "HOME": str(tmp_path / "home")}

    async def body() -> str:
        with (tmp_path / "stderr.txt").open("w") as errlog:
            async with stdio_session(env=env, errlog=errlog) as session:
                r = await session.call_tool("memory_create", {"path": "/memories/user.md", "file_text": "trains\n"})
                return text_of(r)

    assert run_async(body) == "File created successfully at: /memories/user.md"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MNEMO_AGENT", raising=False)
    code, out, err = cli_run(capsys, "ls")
    assert (code, err) == (0, "") and out.split()[1:3] == ["v1", "agent:claude"]
    assert out.rstrip().endswith("memorytool path:/memories/user.md")
    assert cli_run(capsys, "cat", "/memories/user.md") == (0, "trains\n", "")


def cli_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
