"""Mnemo as an MCP server: the memory tool's six commands, the search of its files, a file's history and
the chain check.

```python
from mnemo.tools.mcp import load_tokens, serve_http, serve_stdio

serve_stdio("memory.mnemo.db", agent="claude-code")            # what `mnemo mcp` runs
serve_http("memory.mnemo.db", load_tokens("tokens.txt"), port=8765)
```

Tools: `memory_view`, `memory_create`, `memory_str_replace`, `memory_insert`, `memory_delete`,
`memory_rename` (each returns exactly what `MnemoMemoryToolServer.execute` returns for that command;
an error is an MCP tool error, `isError: true`, with the same text), `memory_search`
(`MnemoMemoryToolServer.search`: the files that best match a query, with their matching lines),
`memory_history` and `memory_verify` (the whole chain's report for an admin on `*`, else the check of
what the agent can read: `MnemoClient.verify_scopes`). A read-only server does not list the five tools
that write. Every command is one
transaction under the writer lock, so several servers on one database never lose an edit.

The server needs the `mcp` extra (`pip install -e '.[mcp]'` in a checkout). Only `mnemo.tools.mcp.app` imports
the SDK, on first use of a name from it: the tools, tokens and defaults need nothing but Mnemo, so a
bad option can be refused before the SDK is loaded, and `import mnemo` never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mnemo.tools.mcp.defaults import DEFAULT_AGENT, DEFAULT_HOST, DEFAULT_PORT, default_agent, default_db_path
from mnemo.tools.mcp.tokens import TOKENS_ENV, TokenTable, load_tokens, parse_tokens
from mnemo.tools.mcp.tools import TOOLS, call_tool, tools_for

if TYPE_CHECKING:
    from mnemo.tools.mcp.app import (
        MCP_PATH,
        AgentServers,
        build_server,
        serve_http,
        serve_stdio,
    )

__all__ = [
    "DEFAULT_AGENT",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "MCP_PATH",
    "TOKENS_ENV",
    "TOOLS",
    "AgentServers",
    "TokenTable",
    "build_server",
    "call_tool",
    "default_agent",
    "default_db_path",
    "load_tokens",
    "parse_tokens",
    "serve_http",
    "serve_stdio",
    "tools_for",
]

_APP_NAMES = frozenset({"MCP_PATH", "AgentServers", "build_server", "serve_http", "serve_stdio"})


def __getattr__(name: str) -> Any:
    if name in _APP_NAMES:
        from mnemo.tools.mcp import app  # noqa: PLC0415 - it imports the optional mcp SDK

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
