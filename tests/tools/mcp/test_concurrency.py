"""Two `mnemo mcp` processes on one database, as when two Claude Code sessions share a memory: each
driven by its own MCP client, editing one file at the same time. No edit may be lost."""

from __future__ import annotations

import anyio
import pytest

pytest.importorskip("mcp")

from helpers.mcp_procs import run_async, stdio_session, text_of  # noqa: E402

from mnemo import MemoryRecord, MnemoClient  # noqa: E402
from mnemo.tools import MnemoMemoryToolServer  # noqa: E402

AGENT = "agent-1"
PATH = "/memories/shared.md"
EDITS = 12  # per server: as many str_replace as insert


def test_two_servers_editing_one_file_lose_no_update(db: str) -> None:
    initial = "".join(f"[{side}{i:02d}]\n" for side in "ab" for i in range(EDITS))
    with MnemoClient(db, AGENT) as client:
        created = MnemoMemoryToolServer(client).execute({"command": "create", "path": PATH, "file_text": initial})
        assert created.text == f"File created successfully at: {PATH}"
    failures: list[tuple[str, str]] = []

    async def editor(side: str, ready: anyio.Event, go: anyio.Event) -> None:
        async with stdio_session("--db", str(db), "--agent", AGENT) as session:
            ready.set()
            await go.wait()
            for i in range(EDITS):
                # A read-modify-write of the whole file each time, interleaved with the other process's.
                old, new = f"[{side}{i:02d}]", f"[{side.upper()}{i:02d}]"
                replaced = await session.call_tool("memory_str_replace", {"path": PATH, "old_str": old, "new_str": new})
                inserted = await session.call_tool(
                    "memory_insert", {"path": PATH, "insert_line": 0, "insert_text": f"<{side}{i:02d}>"}
                )
                for result in (replaced, inserted):
                    if result.is_error:
                        failures.append((side, text_of(result)))

    async def body() -> None:
        ready = [anyio.Event(), anyio.Event()]
        go = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(editor, "a", ready[0], go)
            tg.start_soon(editor, "b", ready[1], go)
            for event in ready:
                await event.wait()
            go.set()  # both processes are up: start editing at once

    run_async(body, timeout=90)
    assert failures == []
    with MnemoClient(db, AGENT, readonly=True) as reader:
        (record,) = reader.query(tags=("memorytool",))
        versions = reader.history(record.id)
    content = record.content
    assert isinstance(content, str)
    lines = content.split("\n")
    for side in "ab":
        for i in range(EDITS):
            assert lines.count(f"[{side.upper()}{i:02d}]") == 1, (side, i)
            assert lines.count(f"<{side}{i:02d}>") == 1, (side, i)
            assert f"[{side}{i:02d}]" not in lines
    assert len(lines) == 4 * EDITS + 1  # every line, and the final newline
    # Every edit is a version of its own: 1 create + 4 * EDITS edits, numbered without a gap.
    assert [v.version for v in versions] == list(range(1, 4 * EDITS + 2))
    # And the two processes' edits did interleave (otherwise this would prove nothing about concurrency).
    assert _switches(versions) >= 2


def _switches(versions: list[MemoryRecord]) -> int:
    """How often the writer of consecutive edits changes from one process to the other."""
    sides = []
    for before, after in zip(versions, versions[1:], strict=False):
        new = set(str(after.content).split("\n")) - set(str(before.content).split("\n"))
        (line,) = new
        sides.append(line[1].lower())
    return sum(a != b for a, b in zip(sides, sides[1:], strict=False))
