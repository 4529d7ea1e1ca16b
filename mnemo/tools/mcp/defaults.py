"""What `mnemo mcp` uses when it is given no database and no agent: one user's memory, in one place."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "DB_NAME",
    "DEFAULT_AGENT",
    "DEFAULT_HOST",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_OPEN_AGENTS",
    "DEFAULT_PORT",
    "DEFAULT_READ_TIMEOUT",
    "default_agent",
    "default_db_path",
    "ensure_parent",
]

DB_NAME = "memory.mnemo.db"
DEFAULT_AGENT = "claude"
DEFAULT_HOST = "127.0.0.1"  # HTTP listens on loopback unless told otherwise
DEFAULT_PORT = 8765
# HTTP: connections open at once, and the seconds a connection has to send a whole request
# (mnemo.tools.mcp.connections)
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_READ_TIMEOUT = 10.0
# HTTP: agents whose client is open at once (each holds the database's index in memory); past it, the
# one served longest ago is closed (mnemo.tools.mcp.app.AgentServers)
DEFAULT_MAX_OPEN_AGENTS = 16


def default_db_path(env: Mapping[str, str] | None = None, platform: str | None = None) -> Path:
    """The user's data directory plus `mnemo/memory.mnemo.db`.

    On macOS `~/Library/Application Support`; elsewhere `$XDG_DATA_HOME` when it is set to an absolute
    path (the XDG base directory rules ignore a relative one), else `~/.local/share`.
    """
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    home = Path(env.get("HOME") or Path.home())
    if platform == "darwin":
        base = home / "Library" / "Application Support"
    else:
        xdg = env.get("XDG_DATA_HOME", "")
        base = Path(xdg) if xdg and os.path.isabs(xdg) else home / ".local" / "share"
    return base / "mnemo" / DB_NAME


def ensure_parent(path: Path) -> None:
    """Create the default database's directory (private to the user) if it does not exist yet."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)


def default_agent(env: Mapping[str, str] | None = None) -> str:
    """`$MNEMO_AGENT` when set (even empty: then MnemoClient refuses it, never another agent), else `claude`."""
    env = os.environ if env is None else env
    return env.get("MNEMO_AGENT", DEFAULT_AGENT)
