"""Mounts through the Anthropic SDK adapters: `MnemoMemoryTool(client, mounts=...)` and its async twin
answer as the mounted server does, and raise `ToolError` with its error text."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mnemo import MnemoClient

pytest.importorskip("anthropic")

from anthropic.lib.tools import ToolError  # noqa: E402
from anthropic.types.beta import (  # noqa: E402
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
)

from mnemo.tools.anthropic import AsyncMnemoMemoryTool, MnemoMemoryTool  # noqa: E402

TEAM = "team:research"
MOUNTS = {"/memories/team": TEAM}
HEADER = "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items and node_modules:"


def test_the_sdk_adapters_serve_mounts(tmp_path: Path) -> None:
    db = str(tmp_path / "sdk.mnemo.db")
    with MnemoClient(db, "admin", durability="none") as admin:
        admin.grant("writer", TEAM, ["read", "write", "forget"])
        admin.grant("reader", TEAM, ["read"])
    with MnemoClient(db, "writer", durability="none") as w, MnemoClient(db, "reader", durability="none") as r:
        writer = MnemoMemoryTool(w, mounts=MOUNTS)
        assert writer.server.mounts == {"/memories": "agent:writer", "/memories/team": TEAM}
        create = BetaMemoryTool20250818CreateCommand(command="create", path="/memories/mine.md", file_text="m")
        assert writer.execute(create) == "File created successfully at: /memories/mine.md"
        move = BetaMemoryTool20250818RenameCommand(
            command="rename", old_path="/memories/mine.md", new_path="/memories/team/shared.md"
        )
        assert writer.execute(move) == "Successfully renamed /memories/mine.md to /memories/team/shared.md"

        reader = AsyncMnemoMemoryTool(r, mounts=MOUNTS)
        view = BetaMemoryTool20250818ViewCommand(command="view", path="/memories")
        edit = BetaMemoryTool20250818StrReplaceCommand(
            command="str_replace", path="/memories/team/shared.md", old_str="m", new_str="x"
        )

        async def read_then_edit() -> str:
            listing = await reader.execute(view)
            with pytest.raises(ToolError) as info:
                await reader.execute(edit)
            assert str(info.value) == f"Error: Permission denied: reader may not write in scope {TEAM}"
            return listing

        assert asyncio.run(read_then_edit()) == "\n".join(
            [HEADER, "1B\t/memories", "1B\t/memories/team/", "1B\t/memories/team/shared.md"]
        )
