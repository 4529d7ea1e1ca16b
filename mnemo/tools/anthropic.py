"""The memory tool for the Anthropic Python SDK's tool runner, served from Mnemo.

```python
from mnemo import MnemoClient
from mnemo.tools.anthropic import MnemoMemoryTool

tool = MnemoMemoryTool(MnemoClient("memory.mnemo.db", agent_id="agent-1"))
# or a shared team folder beside the agent's own memory (docs/MOUNTS.md):
tool = MnemoMemoryTool(client, mounts={"/memories/team": "team:research"})
runner = anthropic.Anthropic().beta.messages.tool_runner(
    model=..., max_tokens=..., messages=[...], tools=[tool])
```

Success results are the same text `MnemoMemoryToolServer.handle` returns; an error result raises
`anthropic.lib.tools.ToolError(text)`, which the tool runner sends back with `is_error: true`. Nothing
else is ever raised, whatever object a method is given. `clear_all_memory()` forgets every file of
the server's memory at once. This module needs the `anthropic-memory-tool` extra; `import mnemo`
never imports it.

`MnemoSearchTool` (and its async twin `AsyncMnemoSearchTool`) is the companion tool `memory_search`: a
function tool for the same runner that searches the memory's files (`MnemoMemoryToolServer.search`,
docs/MEMORY_TOOL.md §11). Give it the memory tool's server, so that both serve one tree:

```python
memory = MnemoMemoryTool(client, mounts={"/memories/team": "team:research"})
runner = anthropic.Anthropic().beta.messages.tool_runner(
    model=..., max_tokens=..., messages=[...], tools=[memory, MnemoSearchTool(memory.server)])
```
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

try:
    from anthropic.lib.tools import (
        BetaAbstractMemoryTool,
        BetaAsyncAbstractMemoryTool,
        BetaAsyncFunctionTool,
        BetaFunctionTool,
        ToolError,
    )
    from anyio.to_thread import run_sync
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    from mnemo._install import install_hint

    raise ImportError(
        f"mnemo.tools.anthropic needs the Anthropic SDK (anthropic>=0.69); install it with: "
        f"{install_hint('anthropic-memory-tool')}"
    ) from _exc

from mnemo.tools.server import (
    DEFAULT_SEARCH_LIMIT,
    INTERNAL_ERROR,
    SEARCH_INPUT_SCHEMA,
    SEARCH_TOOL_NAME,
    CommandResult,
    MnemoMemoryToolServer,
)

if TYPE_CHECKING:
    from anthropic.types.beta import (
        BetaCacheControlEphemeralParam,
        BetaMemoryTool20250818Command,
        BetaMemoryTool20250818CreateCommand,
        BetaMemoryTool20250818DeleteCommand,
        BetaMemoryTool20250818InsertCommand,
        BetaMemoryTool20250818RenameCommand,
        BetaMemoryTool20250818StrReplaceCommand,
        BetaMemoryTool20250818ViewCommand,
    )

    from mnemo.client import MnemoClient

__all__ = ["AsyncMnemoMemoryTool", "AsyncMnemoSearchTool", "MnemoMemoryTool", "MnemoSearchTool"]

log = logging.getLogger("mnemo.tools")


def _server(target: MnemoMemoryToolServer | MnemoClient, options: dict[str, Any]) -> MnemoMemoryToolServer:
    if isinstance(target, MnemoMemoryToolServer):
        if options:
            raise TypeError("server options go to MnemoMemoryToolServer, not to an existing server")
        return target
    return MnemoMemoryToolServer(target, **options)


_UNREADABLE = CommandResult("Error: Invalid input: the object could not be read", True)


def _command_input(command: object) -> object:
    """The input object of an SDK command (its `to_dict()`), or `command` itself; `_UNREADABLE` if
    reading it raises."""
    try:
        to_dict = getattr(command, "to_dict", None)
        if callable(to_dict):
            return to_dict()
    except Exception:
        return _UNREADABLE
    return command


def _run_guarded(run: Callable[[], CommandResult]) -> CommandResult:
    """`run()`, or the internal-error result should it raise (a server subclass's `execute` may)."""
    try:
        return run()
    except Exception:
        log.exception("memory tool server failed")
        return CommandResult(INTERNAL_ERROR, True)


def _outcome(result: CommandResult) -> str:
    if result.is_error:
        raise ToolError(result.text)
    return result.text


class _Served:
    """What the four adapters share: the server they run, and its runs, one at a time, each ending in a
    result (an error result should the server raise)."""

    server: MnemoMemoryToolServer
    _lock: threading.Lock

    def _serve(self, target: MnemoMemoryToolServer | MnemoClient, options: dict[str, Any]) -> None:
        self.server = _server(target, options)
        self._lock = threading.Lock()

    def _execute_locked(self, input: object) -> CommandResult:
        if input is _UNREADABLE:
            return _UNREADABLE
        with self._lock:
            return _run_guarded(lambda: self.server.execute(input))

    def _clear_locked(self) -> CommandResult:
        with self._lock:
            return _run_guarded(self.server.clear_all)

    def _search_locked(self, input: object) -> CommandResult:
        with self._lock:
            return _run_guarded(lambda: self.server.execute_search(input))


class MnemoMemoryTool(BetaAbstractMemoryTool, _Served):
    """A `BetaAbstractMemoryTool` whose files are Mnemo records (see `MnemoMemoryToolServer`).

    Pass a `MnemoMemoryToolServer`, or a `MnemoClient` plus the server's keyword options
    (`root=`, `scope=`, `mounts=`, `create_overwrites=`, ...). With `mounts={"/memories/team":
    "team:research"}` the model sees several scopes in one tree (docs/MOUNTS.md).
    """

    def __init__(
        self,
        target: MnemoMemoryToolServer | MnemoClient,
        *,
        cache_control: BetaCacheControlEphemeralParam | None = None,
        **server_options: Any,
    ) -> None:
        super().__init__(cache_control=cache_control)
        self._serve(target, server_options)

    def call(self, input: object) -> str:
        """Run one tool_use input exactly as `MnemoMemoryToolServer.execute` does."""
        return _outcome(self._execute_locked(input))

    def execute(self, command: BetaMemoryTool20250818Command) -> str:
        """Run one SDK command (or any input object) through the server; never reads `command.command`
        itself, so a malformed object is an error result too."""
        return self._run(command)

    def _run(self, command: object) -> str:
        return self.call(_command_input(command))

    def clear_all_memory(self) -> str:
        """Forget every memory-tool file under the server's root in its scope, in one atomic commit:
        their content, tags and every version are erased from the database files (not only hidden),
        and the chain keeps one `forget` entry naming them. Needs `forget` and `read` in the scope;
        returns `All memory cleared`, or raises `ToolError` with the `Error: ...` text."""
        return _outcome(self._clear_locked())

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


class AsyncMnemoMemoryTool(BetaAsyncAbstractMemoryTool, _Served):
    """The async twin of `MnemoMemoryTool`: each command runs on a worker thread, one at a time."""

    def __init__(
        self,
        target: MnemoMemoryToolServer | MnemoClient,
        *,
        cache_control: BetaCacheControlEphemeralParam | None = None,
        **server_options: Any,
    ) -> None:
        super().__init__(cache_control=cache_control)
        self._serve(target, server_options)

    async def call(self, input: object) -> str:
        """Run one tool_use input exactly as `MnemoMemoryToolServer.execute` does, off the event loop."""
        return _outcome(await run_sync(self._execute_locked, input))

    async def execute(self, command: BetaMemoryTool20250818Command) -> str:
        """Run one SDK command (or any input object) through the server, as `MnemoMemoryTool.execute`."""
        return await self._run(command)

    async def _run(self, command: object) -> str:
        return await self.call(_command_input(command))

    async def clear_all_memory(self) -> str:
        """Forget every memory-tool file under the server's root in its scope, in one atomic commit
        (erased from the database files, not only hidden), off the event loop; see
        `MnemoMemoryTool.clear_all_memory`."""
        return _outcome(await run_sync(self._clear_locked))

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


SEARCH_DESCRIPTION = (
    "Search the files of your memory (the memory tool's /memories directory) for words, and get the paths "
    "of the files that match best, best first, each with its matching lines numbered as the memory tool's "
    "view numbers them. Use it when memory holds many files, or to find where something was noted; then "
    "view a file with the memory tool to read it whole. The query is words (a file matching any of them is "
    "found; more, and rarer, matches rank higher), \"a phrase\" in quotes, word* for every word starting "
    "with word, and -word to leave out files holding it; case and accents do not matter. path narrows the "
    "search to a directory (or a file). mode: hybrid also finds a file that says the same thing in other words "
    "(the default when the memory has an embedder), semantic matches by meaning alone, lexical by words alone."
)


class MnemoSearchTool(BetaFunctionTool[Callable[..., str]], _Served):
    """The companion tool `memory_search` for the SDK's tool runner: a function tool that searches the
    memory's files (`MnemoMemoryToolServer.search`, docs/MEMORY_TOOL.md §11) and answers with its text.

    Pass the memory tool's server (`MnemoSearchTool(memory.server)`) so that both serve one tree, or a
    `MnemoClient` plus the server's keyword options, as for `MnemoMemoryTool`. The input (`query`,
    `path`, `limit`, `mode`) meets the search's own checks, not a coercing validator; an error result raises
    `ToolError` with its text, and nothing else is raised.
    """

    def __init__(
        self,
        target: MnemoMemoryToolServer | MnemoClient,
        *,
        cache_control: BetaCacheControlEphemeralParam | None = None,
        **server_options: Any,
    ) -> None:
        self._serve(target, server_options)

        def memory_search(
            query: str, path: str | None = None, limit: int = DEFAULT_SEARCH_LIMIT, mode: str | None = None
        ) -> str:
            return self.call({"query": query, "path": path, "limit": limit, "mode": mode})

        super().__init__(
            memory_search, name=SEARCH_TOOL_NAME, description=SEARCH_DESCRIPTION,
            input_schema=copy.deepcopy(SEARCH_INPUT_SCHEMA), cache_control=cache_control,
        )

    def call(self, input: object) -> str:
        """Run one tool_use input exactly as `MnemoMemoryToolServer.execute_search` does."""
        return _outcome(self._search_locked(input))


class AsyncMnemoSearchTool(BetaAsyncFunctionTool[Callable[..., Coroutine[Any, Any, str]]], _Served):
    """The async twin of `MnemoSearchTool`: each search runs on a worker thread, one at a time."""

    def __init__(
        self,
        target: MnemoMemoryToolServer | MnemoClient,
        *,
        cache_control: BetaCacheControlEphemeralParam | None = None,
        **server_options: Any,
    ) -> None:
        self._serve(target, server_options)

        async def memory_search(
            query: str, path: str | None = None, limit: int = DEFAULT_SEARCH_LIMIT, mode: str | None = None
        ) -> str:
            return await self.call({"query": query, "path": path, "limit": limit, "mode": mode})

        super().__init__(
            memory_search, name=SEARCH_TOOL_NAME, description=SEARCH_DESCRIPTION,
            input_schema=copy.deepcopy(SEARCH_INPUT_SCHEMA), cache_control=cache_control,
        )

    async def call(self, input: object) -> str:
        """Run one tool_use input exactly as `MnemoMemoryToolServer.execute_search` does, off the event loop."""
        return _outcome(await run_sync(self._search_locked, input))
