"""The memory tool for the Anthropic Python SDK's tool runner, served from Mnemo.

```python
from mnemo import MnemoClient
from mnemo.tools.anthropic import MnemoMemoryTool

tool = MnemoMemoryTool(MnemoClient("memory.mnemo.db", agent_id="agent-1"))
runner = anthropic.Anthropic().beta.messages.tool_runner(
    model=..., max_tokens=..., messages=[...], tools=[tool])
```

Success results are the same text `MnemoMemoryToolServer.handle` returns; an error result raises
`anthropic.lib.tools.ToolError(text)`, which the tool runner sends back with `is_error: true`.
This module needs the `anthropic-memory-tool` extra; `import mnemo` never imports it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

try:
    from anthropic.lib.tools import BetaAbstractMemoryTool, BetaAsyncAbstractMemoryTool, ToolError
    from anyio.to_thread import run_sync
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "mnemo.tools.anthropic needs the Anthropic SDK (anthropic>=0.69); "
        "install it with: pip install 'mnemo-chain[anthropic-memory-tool]'"
    ) from _exc

from mnemo.tools.server import CommandResult, MnemoMemoryToolServer

if TYPE_CHECKING:
    from anthropic.types.beta import (
        BetaCacheControlEphemeralParam,
        BetaMemoryTool20250818CreateCommand,
        BetaMemoryTool20250818DeleteCommand,
        BetaMemoryTool20250818InsertCommand,
        BetaMemoryTool20250818RenameCommand,
        BetaMemoryTool20250818StrReplaceCommand,
        BetaMemoryTool20250818ViewCommand,
    )

    from mnemo.client import MnemoClient

__all__ = ["AsyncMnemoMemoryTool", "MnemoMemoryTool"]


def _server(target: MnemoMemoryToolServer | MnemoClient, options: dict[str, Any]) -> MnemoMemoryToolServer:
    if isinstance(target, MnemoMemoryToolServer):
        if options:
            raise TypeError("server options go to MnemoMemoryToolServer, not to an existing server")
        return target
    return MnemoMemoryToolServer(target, **options)


def _command_input(command: Any) -> object:
    to_dict = getattr(command, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    return command


def _outcome(result: CommandResult) -> str:
    if result.is_error:
        raise ToolError(result.text)
    return result.text


class MnemoMemoryTool(BetaAbstractMemoryTool):
    """A `BetaAbstractMemoryTool` whose files are Mnemo records (see `MnemoMemoryToolServer`).

    Pass a `MnemoMemoryToolServer`, or a `MnemoClient` plus the server's keyword options
    (`root=`, `scope=`, `create_overwrites=`, ...).
    """

    def __init__(
        self,
        target: MnemoMemoryToolServer | MnemoClient,
        *,
        cache_control: BetaCacheControlEphemeralParam | None = None,
        **server_options: Any,
    ) -> None:
        super().__init__(cache_control=cache_control)
        self.server = _server(target, server_options)
        self._lock = threading.Lock()

    def call(self, input: object) -> str:
        """Run one tool_use input exactly as `MnemoMemoryToolServer.execute` does."""
        with self._lock:
            return _outcome(self.server.execute(input))

    def _run(self, command: Any) -> str:
        return self.call(_command_input(command))

    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        return self._run(command)

    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return self._run(command)

    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return self._run(command)

    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return self._run(command)

    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return self._run(command)

    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return self._run(command)


class AsyncMnemoMemoryTool(BetaAsyncAbstractMemoryTool):
    """The async twin of `MnemoMemoryTool`: each command runs on a worker thread, one at a time."""

    def __init__(
        self,
        target: MnemoMemoryToolServer | MnemoClient,
        *,
        cache_control: BetaCacheControlEphemeralParam | None = None,
        **server_options: Any,
    ) -> None:
        super().__init__(cache_control=cache_control)
        self.server = _server(target, server_options)
        self._lock = threading.Lock()

    def _execute_locked(self, input: object) -> CommandResult:
        with self._lock:
            return self.server.execute(input)

    async def call(self, input: object) -> str:
        """Run one tool_use input exactly as `MnemoMemoryToolServer.execute` does, off the event loop."""
        return _outcome(await run_sync(self._execute_locked, input))

    async def _run(self, command: Any) -> str:
        return await self.call(_command_input(command))

    async def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        return await self._run(command)

    async def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return await self._run(command)

    async def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return await self._run(command)

    async def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return await self._run(command)

    async def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return await self._run(command)

    async def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return await self._run(command)
