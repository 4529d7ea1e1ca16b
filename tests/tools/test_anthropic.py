"""The Anthropic SDK adapters, driven by the SDK's real tool runner against a scripted Messages API."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers.backends import commits, damage_payload, entries, stored
from helpers.paths import ROOT

from mnemo import MnemoClient
from mnemo.errors import IntegrityError
from mnemo.tools import MnemoMemoryToolServer

anthropic = pytest.importorskip("anthropic")
httpx2 = pytest.importorskip("httpx2")  # the transport layer of the installed SDK

from anthropic.lib.tools import (  # noqa: E402
    BetaAbstractMemoryTool,
    BetaAsyncAbstractMemoryTool,
    BetaAsyncFunctionTool,
    BetaFunctionTool,
    ToolError,
)
from anthropic.types.beta import (  # noqa: E402
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818ViewCommand,
)

from mnemo.tools.anthropic import (  # noqa: E402
    AsyncMnemoMemoryTool,
    AsyncMnemoSearchTool,
    MnemoMemoryTool,
    MnemoSearchTool,
)
from mnemo.tools.server import SEARCH_INPUT_SCHEMA, STORE_FAILURES  # noqa: E402

ROOT_HEADER = "Here're the files and directories up to 2 levels deep in {}, excluding hidden items and node_modules:"
REPO = str(ROOT)


def tool_use(tool_id: str, **tool_input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "memory", "input": tool_input}


def assistant(n: int, content: list[dict[str, Any]], stop_reason: str = "tool_use") -> dict[str, Any]:
    return {
        "id": f"msg_{n:02d}",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-5-5",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 10},
    }


SCRIPT: list[dict[str, Any]] = [
    assistant(
        1,
        [
            {"type": "text", "text": "Let me check my memory."},
            tool_use("toolu_01", command="view", path="/memories"),
        ],
    ),
    assistant(
        2,
        [
            tool_use(
                "toolu_02",
                command="create",
                path="/memories/user/preferences.md",
                file_text="- likes coffee\n",
            ),
            tool_use("toolu_03", command="view", path="/memories/user/preferences.md"),
        ],
    ),
    assistant(
        3,
        [
            tool_use(
                "toolu_04",
                command="str_replace",
                path="/memories/user/preferences.md",
                old_str="coffee",
                new_str="coffee, black",
            ),
            tool_use("toolu_05", command="create", path="/memories/../etc/passwd", file_text="x"),
            tool_use(
                "toolu_06",
                command="insert",
                path="/memories/user/preferences.md",
                insert_line=1,
                insert_text="- dislikes tea",
            ),
        ],
    ),
    assistant(
        4,
        [
            tool_use("toolu_07", command="rename", old_path="/memories/user", new_path="/memories/people/ana"),
            tool_use("toolu_08", command="view", path="/memories/"),
            tool_use("toolu_09", command="view", path="/memories/user/preferences.md"),
        ],
    ),
    assistant(5, [{"type": "text", "text": "Noted: you like your coffee black."}], stop_reason="end_turn"),
]

EXPECTED_RESULTS: list[list[dict[str, Any]]] = [
    [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_01",
            "content": ROOT_HEADER.format("/memories") + "\n0B\t/memories",
        }
    ],
    [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_02",
            "content": "File created successfully at: /memories/user/preferences.md",
        },
        {
            "type": "tool_result",
            "tool_use_id": "toolu_03",
            "content": "Here's the content of /memories/user/preferences.md with line numbers:\n"
            "     1\t- likes coffee\n     2\t",
        },
    ],
    [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_04",
            "content": "The memory file has been edited. "
            "Here is the snippet showing the change (with line numbers):\n"
            "     1\t- likes coffee, black\n     2\t",
        },
        {
            "type": "tool_result",
            "tool_use_id": "toolu_05",
            "content": "Error: Path /memories/../etc/passwd would escape /memories directory",
            "is_error": True,
        },
        {
            "type": "tool_result",
            "tool_use_id": "toolu_06",
            "content": "The file /memories/user/preferences.md has been edited.",
        },
    ],
    [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_07",
            "content": "Successfully renamed /memories/user to /memories/people/ana",
        },
        {
            "type": "tool_result",
            "tool_use_id": "toolu_08",
            "content": "\n".join(
                [
                    ROOT_HEADER.format("/memories/"),
                    "37B\t/memories",
                    "37B\t/memories/people/",
                    "37B\t/memories/people/ana/",
                ]
            ),
        },
        {
            "type": "tool_result",
            "tool_use_id": "toolu_09",
            "content": "The path /memories/user/preferences.md does not exist. Please provide a valid path.",
            "is_error": True,
        },
    ],
]


class ScriptedAPI:
    """A Messages API that answers with the script, one message per request, and records every request."""

    def __init__(self, script: list[dict[str, Any]]) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []

    def __call__(self, request: Any) -> Any:
        assert request.url.path == "/v1/messages"
        self.requests.append(json.loads(request.content))
        self.headers.append(dict(request.headers))
        return httpx2.Response(200, json=self.script[len(self.requests) - 1])


def check_conversation(api: ScriptedAPI, final: Any, client: MnemoClient) -> None:
    assert final.content[0].text == "Noted: you like your coffee black."
    assert len(api.requests) == len(SCRIPT)
    # the first request defines the tool; later ones repeat it, or continue a server-side thread that has it
    assert api.requests[0]["tools"] == [{"type": "memory_20250818", "name": "memory"}]
    for request in api.requests[1:]:
        assert request.get("tools", api.requests[0]["tools"]) == api.requests[0]["tools"]
    # the memory tool asks for no beta (the SDK may add its own, e.g. for message threads)
    assert all("managed-agents" not in headers.get("anthropic-beta", "") for headers in api.headers)
    sent = [request["messages"][-1] for request in api.requests[1:]]
    assert [message["role"] for message in sent] == ["user"] * 4
    assert [message["content"] for message in sent] == EXPECTED_RESULTS
    records = client.query(tags=("memorytool",))
    assert [(r.tags, r.content, r.version) for r in records] == [
        (
            ("memorytool", "path:/memories/people/ana/preferences.md"),
            "- likes coffee, black\n- dislikes tea\n",
            4,
        )
    ]
    assert client.verify().ok


def test_tool_runner_conversation(client: MnemoClient) -> None:
    api = ScriptedAPI(SCRIPT)
    sdk = anthropic.Anthropic(
        api_key="sk-test", max_retries=0, http_client=httpx2.Client(transport=httpx2.MockTransport(api))
    )
    tool = MnemoMemoryTool(MnemoMemoryToolServer(client))
    runner = sdk.beta.messages.tool_runner(
        model="claude-sonnet-5-5",
        max_tokens=1024,
        messages=[{"role": "user", "content": "I like my coffee black. Remember that."}],
        tools=[tool],
    )
    check_conversation(api, runner.until_done(), client)


def test_async_tool_runner_conversation(client: MnemoClient) -> None:
    api = ScriptedAPI(SCRIPT)

    async def converse() -> Any:
        sdk = anthropic.AsyncAnthropic(
            api_key="sk-test",
            max_retries=0,
            http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(api)),
        )
        runner = sdk.beta.messages.tool_runner(
            model="claude-sonnet-5-5",
            max_tokens=1024,
            messages=[{"role": "user", "content": "I like my coffee black. Remember that."}],
            tools=[AsyncMnemoMemoryTool(client)],
        )
        return await runner.until_done()

    check_conversation(api, asyncio.run(converse()), client)


def test_adapter_calls_and_errors(client: MnemoClient) -> None:
    tool = MnemoMemoryTool(client)
    assert isinstance(tool, BetaAbstractMemoryTool)
    assert tool.name == "memory"
    assert tool.to_dict() == {"type": "memory_20250818", "name": "memory"}
    cached = MnemoMemoryTool(client, cache_control={"type": "ephemeral"})
    assert cached.to_dict() == {
        "type": "memory_20250818",
        "name": "memory",
        "cache_control": {"type": "ephemeral"},
    }
    assert tool.call({"command": "create", "path": "/memories/a.md", "file_text": "x"}) == (
        "File created successfully at: /memories/a.md"
    )
    # the SDK's typed commands go through the same server
    assert tool.execute(BetaMemoryTool20250818ViewCommand(command="view", path="/memories/a.md")) == (
        "Here's the content of /memories/a.md with line numbers:\n     1\tx"
    )
    with pytest.raises(ToolError) as info:
        tool.execute(BetaMemoryTool20250818CreateCommand(command="create", path="/memories/a.md", file_text="y"))
    assert info.value.content == "Error: File /memories/a.md already exists"
    for bad_input, text in [
        (
            {"command": "view", "path": "/memories/nope"},
            "The path /memories/nope does not exist. Please provide a valid path.",
        ),
        ({"command": "destroy"}, "Error: Unknown command: destroy"),
        ({"command": "view"}, "Error: Missing required parameter `path` for command `view`"),
        ("not an object", "Error: Invalid input: expected an object"),
    ]:
        with pytest.raises(ToolError) as info:
            tool.call(bad_input)
        assert info.value.content == text
    server = MnemoMemoryToolServer(client, root="/notes")
    assert MnemoMemoryTool(server).server is server
    with pytest.raises(TypeError):
        MnemoMemoryTool(server, root="/x")
    assert MnemoMemoryTool(client, root="/notes").server.root == "/notes"


def test_async_adapter_direct(client: MnemoClient) -> None:
    tool = AsyncMnemoMemoryTool(client)
    assert isinstance(tool, BetaAsyncAbstractMemoryTool)

    async def go() -> tuple[str, str, str]:
        created = await tool.call({"command": "create", "path": "/memories/b.md", "file_text": "y\n"})
        viewed = await tool.execute(BetaMemoryTool20250818ViewCommand(command="view", path="/memories/b.md"))
        try:
            await tool.call({"command": "delete", "path": "/memories"})
        except ToolError as exc:
            assert isinstance(exc.content, str)
            return str(created), str(viewed), exc.content
        raise AssertionError("no error")

    created, viewed, error = asyncio.run(go())
    assert created == "File created successfully at: /memories/b.md"
    assert viewed == "Here's the content of /memories/b.md with line numbers:\n     1\ty\n     2\t"
    assert error == "Error: Cannot delete the /memories directory itself"


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=120
    )


def test_import_mnemo_never_imports_anthropic() -> None:
    result = _python(
        """
        import sys
        import mnemo, mnemo.tools
        from mnemo.tools import MnemoMemoryToolServer
        assert mnemo.MnemoMemoryToolServer is MnemoMemoryToolServer
        loaded = sorted(m for m in sys.modules if m == "anthropic" or m.startswith("anthropic."))
        assert not loaded, loaded
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_adapter_without_the_sdk_says_what_is_missing() -> None:
    result = _python(
        """
        import sys
        sys.modules["anthropic"] = None  # as if the SDK were not installed
        import mnemo
        from mnemo.tools import MnemoMemoryToolServer
        for attempt in ("import mnemo.tools.anthropic", "from mnemo.tools import MnemoMemoryTool"):
            try:
                exec(attempt)
            except ImportError as exc:
                print(exc)
            else:
                raise SystemExit("no ImportError for " + attempt)
        """
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().split("\n")
    assert len(lines) == 2
    for line in lines:
        assert line.endswith("install it with: pip install -e '.[anthropic-memory-tool]' in a checkout of Mnemo "
                             "(mnemo-chain[anthropic-memory-tool] once it is published)")


# -- clear_all_memory -------------------------------------------------------------------------------------


def test_clear_all_memory_forgets_every_file_in_one_commit(client: MnemoClient, db: str) -> None:
    tool = MnemoMemoryTool(client)
    for path in ("/memories/a.md", "/memories/d/e/f.md", "/memories/.hidden/h", "/memories/node_modules/n.js"):
        tool.call({"command": "create", "path": path, "file_text": f"CLEAR-ME {path}"})
    other_scope = MnemoMemoryToolServer(client, scope="team:kept")
    other_root = MnemoMemoryToolServer(client, root="/notes")
    other_scope.execute({"command": "create", "path": "/memories/a.md", "file_text": "KEPT-SCOPE"})
    other_root.execute({"command": "create", "path": "/notes/a.md", "file_text": "KEPT-ROOT"})
    frames = commits(db)
    assert tool.clear_all_memory() == "All memory cleared"
    assert commits(db) == frames + 1  # one atomic commit
    forgets = [e for e in entries(db) if e.op == "forget"]
    assert len(forgets) == 1 and len(forgets[0].body["ids"]) == 4
    assert tool.call({"command": "view", "path": "/memories"}) == ROOT_HEADER.format("/memories") + "\n0B\t/memories"
    blob = b"".join(stored(db).values())
    assert b"CLEAR-ME" not in blob  # erased from every file (table) of the database, not only hidden
    assert b"KEPT-SCOPE" in blob and b"KEPT-ROOT" in blob
    assert client.verify().ok
    # nothing left: still cleared, and nothing written
    assert tool.clear_all_memory() == "All memory cleared"
    assert commits(db) == frames + 1


def test_clear_all_memory_async_and_refusals(client: MnemoClient, db: str) -> None:
    tool = AsyncMnemoMemoryTool(client)

    async def go() -> str:
        await tool.call({"command": "create", "path": "/memories/x.md", "file_text": "x"})
        return await tool.clear_all_memory()

    assert asyncio.run(go()) == "All memory cleared"
    assert client.list_records(tags=("memorytool",)) == []
    client.remember("x", tags=("memorytool", "path:/memories/x.md"))
    with MnemoClient(db, "agent-2", durability="none") as other:
        shared = MnemoMemoryTool(other, scope=client.home_scope)
        with pytest.raises(ToolError) as info:
            shared.clear_all_memory()
        assert info.value.content == "Error: Permission denied: agent-2 may not forget in scope agent:agent-1"
        client.grant("agent-2", client.home_scope, ["forget"])
        with pytest.raises(ToolError) as info:
            shared.clear_all_memory()
        assert info.value.content == "Error: Permission denied: agent-2 may not read in scope agent:agent-1"
        client.grant("agent-2", client.home_scope, ["read"])
        assert shared.clear_all_memory() == "All memory cleared"
    assert client.list_records(tags=("memorytool",)) == []


# -- the companion search tool, memory_search -----------------------------------------------------------------
# On the file backend (`db_path`), whose storage serves recall.


def search_use(tool_id: str, **tool_input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "memory_search", "input": tool_input}


SEARCH_HEADER = "Here're the files in {} that match `{}`, best match first, with their matching lines:"
SEARCH_SCRIPT: list[dict[str, Any]] = [
    assistant(1, [
        tool_use("toolu_01", command="create", path="/memories/user/profile.md",
                 file_text="# Ana\n- vegetarian\n- prefers trains over planes\n"),
        tool_use("toolu_02", command="create", path="/memories/trips/lisbon.md",
                 file_text="# Trip: Lisbon\n- when: June\n- book: night train via Madrid\n"),
    ]),
    assistant(2, [
        {"type": "text", "text": "Let me search my memory."},
        search_use("toolu_03", query="train* plane*"),
        search_use("toolu_04", query="june", path="/memories/trips/lisbon.md"),
        search_use("toolu_05", query='"night'),
        search_use("toolu_06", query="train", limit="5"),
        search_use("toolu_07", query="zebra", path="/memories/trips"),
        search_use("toolu_08", query="train", path="/memories/../etc"),
    ]),
    assistant(3, [{"type": "text", "text": "You prefer trains."}], stop_reason="end_turn"),
]
SEARCH_RESULTS: list[dict[str, Any]] = [
    {"type": "tool_result", "tool_use_id": "toolu_03", "content": "\n".join([
        SEARCH_HEADER.format("/memories", "train* plane*"),
        "/memories/user/profile.md", "     3\t- prefers trains over planes",
        "/memories/trips/lisbon.md", "     3\t- book: night train via Madrid",
    ])},
    {"type": "tool_result", "tool_use_id": "toolu_04", "content": "\n".join([
        SEARCH_HEADER.format("/memories/trips/lisbon.md", "june"), "/memories/trips/lisbon.md", "     2\t- when: June",
    ])},
    {"type": "tool_result", "tool_use_id": "toolu_05", "is_error": True,
     "content": "Error: Invalid query: the query has an unclosed quote in '\"night': close the phrase with \" or "
                "remove the quote"},
    {"type": "tool_result", "tool_use_id": "toolu_06", "is_error": True,
     "content": "Error: Parameter `limit` of command `search` must be an integer from 1 to 100"},
    {"type": "tool_result", "tool_use_id": "toolu_07",
     "content": "No file in /memories/trips matches `zebra`. Try other or fewer words, a prefix such as plan* (it "
                "finds plan, plans, planning), or a wider path; or view the path to see what it holds."},
    {"type": "tool_result", "tool_use_id": "toolu_08", "is_error": True,
     "content": "Error: Path /memories/../etc would escape /memories directory"},
]


def check_search_conversation(api: ScriptedAPI, final: Any) -> None:
    assert final.content[0].text == "You prefer trains."
    assert len(api.requests) == len(SEARCH_SCRIPT)
    memory, search = api.requests[0]["tools"]
    assert memory == {"type": "memory_20250818", "name": "memory"}
    assert set(search) == {"name", "description", "input_schema"}
    assert search["name"] == "memory_search" and search["input_schema"] == SEARCH_INPUT_SCHEMA
    assert "view a file with the memory tool to read it whole" in search["description"]
    sent = api.requests[2]["messages"][-1]
    assert sent["role"] == "user"
    assert sent["content"] == SEARCH_RESULTS


def test_search_tool_through_the_tool_runner(db_path: Path) -> None:
    api = ScriptedAPI(SEARCH_SCRIPT)
    sdk = anthropic.Anthropic(
        api_key="sk-test", max_retries=0, http_client=httpx2.Client(transport=httpx2.MockTransport(api))
    )
    with MnemoClient(db_path, "agent-1", durability="none") as client:
        memory = MnemoMemoryTool(client)
        runner = sdk.beta.messages.tool_runner(
            model="claude-sonnet-5-5", max_tokens=1024, tools=[memory, MnemoSearchTool(memory.server)],
            messages=[{"role": "user", "content": "How do I like to travel?"}],
        )
        check_search_conversation(api, runner.until_done())


def test_async_search_tool_through_the_tool_runner(db_path: Path) -> None:
    api = ScriptedAPI(SEARCH_SCRIPT)

    async def converse(client: MnemoClient) -> Any:
        sdk = anthropic.AsyncAnthropic(
            api_key="sk-test", max_retries=0, http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(api)),
        )
        memory = AsyncMnemoMemoryTool(client)
        runner = sdk.beta.messages.tool_runner(
            model="claude-sonnet-5-5", max_tokens=1024, tools=[memory, AsyncMnemoSearchTool(memory.server)],
            messages=[{"role": "user", "content": "How do I like to travel?"}],
        )
        return await runner.until_done()

    with MnemoClient(db_path, "agent-1", durability="none") as client:
        check_search_conversation(api, asyncio.run(converse(client)))


def test_search_tool_calls_errors_and_options(db_path: Path) -> None:
    with MnemoClient(db_path, "agent-1", durability="none") as client:
        tool = MnemoSearchTool(client, mounts={"/memories/team": "team:x"})
        assert isinstance(tool, BetaFunctionTool) and tool.name == "memory_search"
        assert tool.server.mounts == {"/memories": "agent:agent-1", "/memories/team": "team:x"}
        assert MnemoSearchTool(client, cache_control={"type": "ephemeral"}).to_dict()["cache_control"] == {
            "type": "ephemeral"
        }
        tool.server.execute({"command": "create", "path": "/memories/a.md", "file_text": "otters\n"})
        expected = tool.server.search("otter*").text
        assert tool.call({"query": "otter*"}) == expected
        assert tool.func("otter*") == expected  # the function the tool wraps, callable from Python
        assert tool.func("otter*", mode="lexical") == expected
        for bad, text in [
            ("not an object", "Error: Invalid input: expected an object"),
            ({"query": "otter*", "limit": 0}, "Error: Parameter `limit` of command `search` must be an integer from 1 "
                                              "to 100"),
            ({"query": "-otters"}, "Error: Invalid query: the query has only excluded words (-word): add at least "
                                   "one word to search for"),
        ]:
            with pytest.raises(ToolError) as info:
                tool.call(bad)
            assert info.value.content == text
        with pytest.raises(TypeError):
            MnemoSearchTool(tool.server, root="/x")
        assert MnemoSearchTool(tool.server).server is tool.server

        async_tool = AsyncMnemoSearchTool(tool.server)
        assert isinstance(async_tool, BetaAsyncFunctionTool)

        async def go() -> tuple[str, str, str]:
            via_call = await async_tool.call({"query": "otter*"})
            via_func = await async_tool.func("otter*", limit=1)
            assert await async_tool.func("otter*", mode="lexical") == via_func  # the sync function's parameters
            try:
                await async_tool.call({"query": "otter*", "path": "/nope"})
            except ToolError as exc:
                assert isinstance(exc.content, str)
                return via_call, via_func, exc.content
            raise AssertionError("no error")

        assert asyncio.run(go()) == (expected, expected, "Error: Path must start with /memories, got: /nope")


def test_a_damaged_store_reaches_the_sdk_tools_naming_no_database(
    db: str, client: MnemoClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK's memory and search tools raise the memory tool's text for a failure of the store itself
    (docs/MEMORY_TOOL.md §3), naming neither the database's path nor its server; the log has the store's
    own words."""
    told = dict(STORE_FAILURES)[IntegrityError]
    tool = MnemoMemoryTool(client)
    tool.call({"command": "create", "path": "/memories/a.md", "file_text": "some words"})
    damage_payload(db, client.query()[0].seq)
    with caplog.at_level(logging.WARNING, "mnemo.tools"):
        for run in (lambda: tool.call({"command": "view", "path": "/memories/a.md"}),
                    lambda: MnemoSearchTool(tool.server).call({"query": "words"}),
                    lambda: asyncio.run(AsyncMnemoMemoryTool(tool.server).call({"command": "view",
                                                                                 "path": "/memories/a.md"}))):
            with pytest.raises(ToolError) as info:
                run()
            assert info.value.content == told
    assert client.path in caplog.text
