"""Drive `mnemo mcp` with the MCP SDK's own client, as Claude Code or Claude Desktop does.

    pip install -e '.[mcp]'                 # in the checkout
    python examples/mcp_client.py [DB]      # default: memory.mnemo.db in a fresh temporary folder
                                            # (DB: a file path or a postgresql:// URI)

It starts `mnemo mcp` over stdio, lists the tools, remembers something, edits it, reads it back with
its history, checks the chain, and stops the server by closing the connection.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def main(db: str) -> None:
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "mnemo", "mcp", "--db", db, "--agent", "example"]
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = (await session.list_tools()).tools
        print("tools:", ", ".join(tool.name for tool in tools))
        for name, arguments in [
            ("memory_view", {"path": "/memories"}),
            ("memory_create", {"path": "/memories/user.md", "file_text": "The user prefers trains.\n"}),
            ("memory_str_replace", {"path": "/memories/user.md", "old_str": "trains", "new_str": "night trains"}),
            ("memory_view", {"path": "/memories/user.md"}),
            ("memory_history", {"path": "/memories/user.md"}),
            ("memory_view", {"path": "/memories/../etc/passwd"}),
            ("memory_verify", {}),
        ]:
            result = await session.call_tool(name, arguments)
            text = "\n".join(block.text for block in result.content if block.type == "text")
            print(f"\n> {name} {arguments}{'  [error]' if result.is_error else ''}\n{text}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else str(Path(tmp) / "memory.mnemo.db"))
