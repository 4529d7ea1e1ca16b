"""The memory-tool facade: Anthropic's `memory_20250818` tool served from a Mnemo database.

`MnemoMemoryToolServer` needs nothing but Mnemo. The Anthropic SDK adapters (`MnemoMemoryTool`,
`AsyncMnemoMemoryTool`, and the companion search tools `MnemoSearchTool`, `AsyncMnemoSearchTool`) live
in `mnemo.tools.anthropic` and are imported from there on first use, so that importing Mnemo never
imports the SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mnemo.tools.paths import PathError, canonicalize
from mnemo.tools.server import CommandResult, MnemoMemoryToolServer

if TYPE_CHECKING:
    from mnemo.tools.anthropic import AsyncMnemoMemoryTool, AsyncMnemoSearchTool, MnemoMemoryTool, MnemoSearchTool

__all__ = [
    "AsyncMnemoMemoryTool",
    "AsyncMnemoSearchTool",
    "CommandResult",
    "MnemoMemoryTool",
    "MnemoSearchTool",
    "MnemoMemoryToolServer",
    "PathError",
    "canonicalize",
]

_SDK_NAMES = frozenset({"MnemoMemoryTool", "AsyncMnemoMemoryTool", "MnemoSearchTool", "AsyncMnemoSearchTool"})


def __getattr__(name: str) -> Any:
    if name in _SDK_NAMES:
        from mnemo.tools import anthropic as adapter  # noqa: PLC0415 - it imports the optional SDK

        return getattr(adapter, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
