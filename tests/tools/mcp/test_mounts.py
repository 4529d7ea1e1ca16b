"""`mnemo mcp --mount POINT=SCOPE` end to end: a spawned server driven by the MCP SDK's client answers
every call exactly as an in-process `MnemoMemoryToolServer(mounts=...)` does on a twin database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from helpers.mcp_procs import run_async, stdio_session, text_of  # noqa: E402

from mnemo import MnemoClient  # noqa: E402
from mnemo.tools import CommandResult, MnemoMemoryToolServer  # noqa: E402
from mnemo.tools.mcp.tools import call_tool  # noqa: E402

AGENT = "agent-1"
TEAM, ORG = "team:research", "org:handbook"
MOUNTS = {"/memories/team": TEAM, "/memories/org": ORG}

SEQUENCE: list[tuple[str, dict[str, Any]]] = [
    ("memory_view", {"path": "/memories"}),
    ("memory_create", {"path": "/memories/todo.md", "file_text": "- ship mounts\n"}),
    ("memory_create", {"path": "/memories/team/plan.md", "file_text": "plan\n"}),
    ("memory_str_replace", {"path": "/memories/team/plan.md", "old_str": "plan", "new_str": "the plan"}),
    ("memory_view", {"path": "/memories/org/rules.md"}),
    ("memory_insert", {"path": "/memories/org/rules.md", "insert_line": 0, "insert_text": "x"}),
    ("memory_create", {"path": "/memories/org/new.md", "file_text": "x"}),
    ("memory_rename", {"old_path": "/memories/todo.md", "new_path": "/memories/team/todo.md"}),
    ("memory_rename", {"old_path": "/memories/org/rules.md", "new_path": "/memories/rules.md"}),
    ("memory_rename", {"old_path": "/memories/team", "new_path": "/memories/t"}),
    ("memory_delete", {"path": "/memories/org"}),
    ("memory_history", {"path": "/memories/team/plan.md"}),
    ("memory_history", {"path": "/memories/org/rules.md"}),
    ("memory_view", {"path": "/memories"}),
    ("memory_delete", {"path": "/memories/team/todo.md"}),
    ("memory_view", {"path": "/memories/team"}),
]


def prepare(db: Path) -> None:
    with MnemoClient(db, "owner", durability="none") as owner:
        owner.grant(AGENT, TEAM, ["read", "write", "forget"])
        owner.grant(AGENT, ORG, ["read"])
        org = MnemoMemoryToolServer(owner, scope=ORG)
        assert not org.execute({"command": "create", "path": "/memories/rules.md", "file_text": "be kind\n"}).is_error


def without_times(text: str) -> str:
    """History lines name the time of each version, which differs between the two databases."""
    return "\n".join(line.split(", ", 1)[0] + ", " + line.split(", ", 2)[2] if line.startswith("--- version")
                     else line for line in text.split("\n"))


def test_mcp_with_mounts_answers_as_the_mounted_server(tmp_path: Path) -> None:
    db, reference = tmp_path / "mcp.db", tmp_path / "reference.db"
    prepare(db)
    prepare(reference)
    args = ["--db", str(db), "--agent", AGENT, "--mount", "/memories/team=team:research",
            "--mount", "/memories/org/=org:handbook"]

    async def body() -> list[tuple[str, bool]]:
        out = []
        with (tmp_path / "stderr.txt").open("w") as errlog:
            async with stdio_session(*args, errlog=errlog) as session:
                for tool, arguments in SEQUENCE:
                    result = await session.call_tool(tool, arguments)
                    out.append((text_of(result), bool(result.is_error)))
        return out

    got = run_async(body)
    with MnemoClient(reference, AGENT, durability="none") as client:
        server = MnemoMemoryToolServer(client, mounts=MOUNTS)
        expected = [(r.text, r.is_error) for r in (call_tool(server, tool, a) for tool, a in SEQUENCE)]
    assert [(without_times(t), e) for t, e in got] == [(without_times(t), e) for t, e in expected]
    stderr = (tmp_path / "stderr.txt").read_text()
    assert (f"mnemo mcp: serving {db} as agent {AGENT}, scope agent:{AGENT}, "
            "mounts /memories/org=org:handbook /memories/team=team:research, over stdio\n") in stderr
    # not vacuous: the mounts are there, the read-only one refuses, the moves across mounts happen
    assert got[6] == (f"Error: Permission denied: {AGENT} may not write in scope {ORG}", True)
    assert got[7] == ("Successfully renamed /memories/todo.md to /memories/team/todo.md", False)
    assert got[8] == (f"Error: Permission denied: {AGENT} may not forget in scope {ORG}", True)
    assert got[9] == ("Error: Cannot rename the /memories/team directory itself", True)
    assert got[11][0].startswith("History of /memories/team/plan.md: 2 versions, oldest first\n--- version 1, ")
    assert "at /memories/team/plan.md (seq " in got[11][0]
    assert got[13][0].split("\n")[1:] == [
        "31B\t/memories", "8B\t/memories/org/", "8B\t/memories/org/rules.md", "23B\t/memories/team/",
        "9B\t/memories/team/plan.md", "14B\t/memories/team/todo.md",
    ]


def test_every_agent_of_a_server_gets_the_mounts_beside_its_own_memory(tmp_path: Path) -> None:
    from mnemo.tools.mcp.app import AgentServers

    db = tmp_path / "m.db"
    prepare(db)
    pool = AgentServers(db, mounts={"/memories/team": TEAM}, read_only=True)
    try:
        first, second = pool.get(AGENT), pool.get("agent-2")
        assert first.mounts == {"/memories": f"agent:{AGENT}", "/memories/team": TEAM}
        assert second.mounts == {"/memories": "agent:agent-2", "/memories/team": TEAM}
        # a read-only database lists across the mounts, and refuses writes with its own text
        assert call_tool(first, "memory_view", {"path": "/memories"}).text.split("\n")[1:] == [
            "0B\t/memories", "0B\t/memories/team/"
        ]
        # agent-2 holds no grant on the team's scope: the mount is not there for it
        assert call_tool(second, "memory_view", {"path": "/memories/team"}) == CommandResult(
            "The path /memories/team does not exist. Please provide a valid path.", True
        )
        assert call_tool(first, "memory_create", {"path": "/memories/team/x", "file_text": "x"}, True).text == (
            "Error: Unknown tool: memory_create"
        )
        assert first.execute({"command": "create", "path": "/memories/team/x", "file_text": "x"}).text == (
            "Error: The memory store is read-only"
        )
    finally:
        pool.close()
