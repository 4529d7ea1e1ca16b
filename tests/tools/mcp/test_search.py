"""`memory_search` over MCP: listed with its schema and hints (with `--read-only` too), named in the
server's instructions, and answering every call, text and error flag, as `MnemoMemoryToolServer.search`
does, within `max_view_chars`, across mounts; driven by the MCP SDK's own client against a spawned
`mnemo mcp`. On the file backend, whose storage serves recall."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from helpers.backends import state  # noqa: E402
from helpers.mcp_procs import run_async, stdio_session, text_of  # noqa: E402

from mnemo import MnemoClient  # noqa: E402
from mnemo.tools import MnemoMemoryToolServer  # noqa: E402
from mnemo.tools.mcp.tools import INSTRUCTIONS, READ_ONLY_INSTRUCTIONS, call_tool, tools_for  # noqa: E402
from mnemo.tools.server import DEFAULT_MAX_VIEW_CHARS, SEARCH_INPUT_SCHEMA  # noqa: E402
from mnemo.tools.text import SEARCH_CUT_NOTE  # noqa: E402

AGENT = "agent-1"
TEAM = "team:research"

CALLS: list[dict[str, Any]] = [
    {"query": "train* plane*"},
    {"query": "train*", "path": "/memories/trips"},
    {"query": "june", "path": "/memories/trips/lisbon.md"},
    {"query": "zebra"},
    {"query": "train*", "limit": 1},
    {"query": "train*", "path": None, "limit": None, "command": "delete", "junk": 1},
    {"query": '"night'},
    {"query": "-train"},
    {"query": "train", "path": "/etc"},
    {"query": "train", "path": "/memories/../x"},
    {"query": "train", "path": "/memories/nowhere"},
    {"query": "train", "limit": "5"},
    {"query": "train", "limit": 0},
    {"query": "train", "limit": True},
    {"query": 7},
    {"path": "/memories"},
    {},
]


def fill(db: Path) -> None:
    with MnemoClient(db, AGENT, durability="none") as client:
        server = MnemoMemoryToolServer(client)
        for path, text in [
            ("/memories/user/profile.md", "# Ana\n- vegetarian\n- prefers trains over planes\n"),
            ("/memories/trips/lisbon.md", "# Trip: Lisbon\n- when: June\n- book: night train via Madrid\n"),
        ]:
            assert not server.execute({"command": "create", "path": path, "file_text": text}).is_error


def expected_results(db: Path, calls: list[dict[str, Any]], **options: Any) -> list[tuple[str, bool]]:
    with MnemoClient(db, AGENT, readonly=True) as client:
        server = MnemoMemoryToolServer(client, **options)
        return [(r.text, r.is_error) for r in (server.execute_search(call) for call in calls)]


def test_memory_search_over_stdio_answers_as_the_server(tmp_path: Path) -> None:
    db = tmp_path / "memory.mnemo.db"
    fill(db)
    before = state(db)

    async def body() -> tuple[Any, list[Any], list[tuple[str, bool]]]:
        async with stdio_session("--db", str(db), "--agent", AGENT) as session:
            init = await session.initialize()
            listed = (await session.list_tools()).tools
            out = []
            for call in CALLS:
                result = await session.call_tool("memory_search", call)
                out.append((text_of(result), bool(result.is_error)))
            return init, listed, out

    init, listed, got = run_async(body)
    assert init.instructions == INSTRUCTIONS
    assert "call memory_search with a few words" in init.instructions
    (tool,) = [t for t in listed if t.name == "memory_search"]
    assert tool.title == "Search memory"
    assert tool.input_schema == SEARCH_INPUT_SCHEMA
    assert tool.input_schema["required"] == ["query"]
    assert tool.annotations is not None and tool.annotations.read_only_hint is True
    assert (tool.annotations.destructive_hint, tool.annotations.idempotent_hint) == (False, True)
    assert "memory_view" in (tool.description or "")
    assert got == expected_results(db, CALLS)
    # Not vacuous: the calls reached the search's own texts, successes and errors.
    assert got[0] == ("\n".join([
        "Here're the files in /memories that match `train* plane*`, best match first, with their matching lines:",
        "/memories/user/profile.md", "     3\t- prefers trains over planes",
        "/memories/trips/lisbon.md", "     3\t- book: night train via Madrid",
    ]), False)
    assert got[3][0].startswith("No file in /memories matches `zebra`.") and not got[3][1]
    # null counts as omitted, and other arguments (a `command` too) are ignored
    assert got[5] == expected_results(db, [{"query": "train*"}])[0]
    assert got[6] == ("Error: Invalid query: the query has an unclosed quote in '\"night': close the phrase with \" "
                      "or remove the quote", True)
    assert got[10] == ("The path /memories/nowhere does not exist. Please provide a valid path.", True)
    assert got[11] == ("Error: Parameter `limit` of command `search` must be an integer from 1 to 100", True)
    assert got[16] == ("Error: Missing required parameter `query` for command `search`", True)
    assert state(db) == before  # a search writes nothing


def test_read_only_lists_memory_search_and_answers_it(tmp_path: Path) -> None:
    db = tmp_path / "memory.mnemo.db"
    fill(db)
    before = state(db)

    async def body() -> tuple[Any, list[str], list[tuple[str, bool]]]:
        async with stdio_session("--db", str(db), "--agent", AGENT, "--read-only") as session:
            init = await session.initialize()
            names = [t.name for t in (await session.list_tools()).tools]
            out = []
            for call in CALLS[:4]:
                result = await session.call_tool("memory_search", call)
                out.append((text_of(result), bool(result.is_error)))
            return init, names, out

    init, names, got = run_async(body)
    assert names == ["memory_view", "memory_search", "memory_history", "memory_verify"]
    assert [t.name for t in tools_for(True)] == names
    assert init.instructions == READ_ONLY_INSTRUCTIONS
    assert "call memory_search with a few words" in init.instructions
    assert got == expected_results(db, CALLS[:4])
    assert not any(is_error for _, is_error in got)
    assert state(db) == before


def test_a_result_over_mcp_stays_within_max_view_chars(tmp_path: Path) -> None:
    db = tmp_path / "memory.mnemo.db"
    with MnemoClient(db, AGENT, durability="none") as client:
        server = MnemoMemoryToolServer(client)
        for i in range(60):
            text = "\n".join(f"pelican {i} {j} " + "p" * 180 for j in range(4))
            assert not server.execute({"command": "create", "path": f"/memories/birds/{i:02d}.md",
                                       "file_text": text}).is_error

    async def body() -> tuple[str, bool]:
        async with stdio_session("--db", str(db), "--agent", AGENT) as session:
            result = await session.call_tool("memory_search", {"query": "pelican", "limit": 60})
            return text_of(result), bool(result.is_error)

    text, is_error = run_async(body)
    assert not is_error and len(text) <= DEFAULT_MAX_VIEW_CHARS
    k = sum(1 for line in text.split("\n") if line.startswith("/memories/"))
    assert 0 < k < 60
    assert text.endswith("\n" + SEARCH_CUT_NOTE.format(k=k, m=60))
    assert (text, is_error) == expected_results(db, [{"query": "pelican", "limit": 60}])[0]


def test_memory_search_over_mounts(tmp_path: Path) -> None:
    db = tmp_path / "memory.mnemo.db"
    with MnemoClient(db, "owner", durability="none") as owner:
        owner.grant(AGENT, TEAM, ["read"])
        for scope, path, text in [
            (TEAM, "/memories/plan.md", "the plan: beavers first"),
            ("org:secret", "/memories/beavers.md", "secret beavers, beavers"),
            (f"agent:{AGENT}", "/memories/mine.md", "my beavers"),
        ]:
            created = MnemoMemoryToolServer(owner, scope=scope).execute(
                {"command": "create", "path": path, "file_text": text})
            assert not created.is_error
    calls = [{"query": "beaver*"}, {"query": "beaver*", "path": "/memories/team"},
             {"query": "beaver*", "path": "/memories/org"}]

    async def body() -> list[tuple[str, bool]]:
        args = ["--db", str(db), "--agent", AGENT, "--mount", f"/memories/team={TEAM}", "--mount",
                "/memories/org=org:secret"]
        async with stdio_session(*args) as session:
            results = [await session.call_tool("memory_search", c) for c in calls]
            return [(text_of(r), bool(r.is_error)) for r in results]

    got = run_async(body)
    mounts = {"/memories/team": TEAM, "/memories/org": "org:secret"}
    assert got == expected_results(db, calls, mounts=mounts)
    paths = sorted(line for line in got[0][0].split("\n") if line.startswith("/"))
    assert paths == ["/memories/mine.md", "/memories/team/plan.md"]  # org:secret is not readable: not there
    assert "secret" not in got[0][0]
    assert got[2] == ("The path /memories/org does not exist. Please provide a valid path.", True)


def test_call_tool_runs_the_search_with_its_own_fields_only(tmp_path: Path) -> None:
    db = tmp_path / "memory.mnemo.db"
    fill(db)
    with MnemoClient(db, AGENT, durability="none") as client:
        server = MnemoMemoryToolServer(client)
        for call in CALLS:
            assert call_tool(server, "memory_search", call) == server.execute_search(
                {k: v for k, v in call.items() if k in ("query", "path", "limit")})
        assert call_tool(server, "memory_search", None) == server.execute_search({})
        # read-only: still served
        assert call_tool(server, "memory_search", {"query": "june"}, read_only=True) == server.search("june")
