"""The MCP server: the tools of `mnemo.tools.mcp.tools` on the SDK's low-level `Server`, over stdio or
streamable HTTP.

The low-level server, not `MCPServer`: it publishes the tools' JSON schemas exactly as written and hands
a call's arguments over untouched, so they meet the memory tool's own checks and error texts rather
than a coercing validator's. Every call runs in a worker thread (a command may wait for the writer
lock or an fsync), as the agent the connection belongs to: the one `serve_stdio` was given, or the
one an HTTP request's bearer token names.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

try:
    import anyio
    import mcp.types as types
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    from mnemo._install import install_hint

    raise ImportError(f"mnemo.tools.mcp needs the MCP Python SDK (mcp>=2); install it with: {install_hint('mcp')}") \
        from _exc
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl

from mnemo._version import __version__
from mnemo.client import MnemoClient
from mnemo.errors import Closed, InvalidInput
from mnemo.recall.embedding import Embedder
from mnemo.storage.contract import shown_name
from mnemo.tools.mcp.connections import ConnectionGuard, bind_listener, guarded_protocol, is_loopback, url_host
from mnemo.tools.mcp.defaults import (
    DEFAULT_HOST,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_OPEN_AGENTS,
    DEFAULT_PORT,
    DEFAULT_READ_TIMEOUT,
    default_agent,
    default_db_path,
    ensure_parent,
)
from mnemo.tools.mcp.tokens import TokenTable
from mnemo.tools.mcp.tools import INSTRUCTIONS, READ_ONLY_INSTRUCTIONS, ToolSpec, call_tool, tools_for
from mnemo.tools.server import CommandResult, MnemoMemoryToolServer

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "MCP_PATH",
    "AgentServers",
    "build_server",
    "serve_http",
    "serve_stdio",
]

log = logging.getLogger("mnemo.tools.mcp")

SERVER_NAME = "mnemo"
MCP_PATH = "/mcp"
SHUTDOWN_GRACE_SECONDS = 5

DbArg = str | os.PathLike[str]


class AgentServers:
    """A `MnemoClient` and memory-tool server per agent, opened on first use, at most `max_open` at once.

    Each open client holds the database's index in memory, so a server of many agents would otherwise
    grow with every agent it has served. Past `max_open`, the agent served longest ago whose server no
    call is using is closed (and opened again on its next call, with what the database holds: nothing a
    call sees depends on it). When every open server is in use, a call for another agent waits for one
    of them to finish. `close()` closes them all."""

    def __init__(
        self,
        db: DbArg,
        scope: str | None = None,
        read_only: bool = False,
        lock_timeout: float | None = None,
        mounts: Mapping[str, str] | None = None,
        embedder: Embedder | str | None = None,
        max_open: int = DEFAULT_MAX_OPEN_AGENTS,
    ) -> None:
        if not isinstance(max_open, int) or isinstance(max_open, bool) or max_open < 1:
            raise InvalidInput(f"max_open must be a positive int, got {max_open!r}")
        self._db = db
        self._scope = scope
        self._mounts = None if mounts is None else dict(mounts)
        self._read_only = read_only
        self._options: dict[str, Any] = {} if lock_timeout is None else {"lock_timeout": lock_timeout}
        if embedder is not None:  # memory_search then matches by meaning too (hybrid, by default)
            self._options["embedder"] = embedder
        self._max_open = max_open
        self._changed = threading.Condition()
        # agent -> its server, least recently used first; and how many calls use each one now
        self._servers: OrderedDict[str, MnemoMemoryToolServer | _Opening] = OrderedDict()
        self._using: Counter[str] = Counter()
        self._closed = False

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def max_open(self) -> int:
        """How many agents' servers are open at most at once."""
        return self._max_open

    @property
    def open_agents(self) -> list[str]:
        """The agents whose server is open now, served longest ago first."""
        with self._changed:
            return list(self._servers)

    def get(self, agent: str) -> MnemoMemoryToolServer:
        """`agent`'s server, opened if it is not open. Not held: once `max_open` other agents have been
        served since, it may be closed; a call holds its server through `serving`."""
        with self.serving(agent) as server:
            return server

    @contextlib.contextmanager
    def serving(self, agent: str) -> Iterator[MnemoMemoryToolServer]:
        """`agent`'s server, held open (never closed to make room) until the block ends."""
        server = self._acquire(agent)
        try:
            yield server
        finally:
            with self._changed:
                self._using[agent] -= 1
                if not self._using[agent]:
                    del self._using[agent]
                self._changed.notify_all()

    def _acquire(self, agent: str) -> MnemoMemoryToolServer:
        with self._changed:
            while True:
                if self._closed:
                    raise Closed("the MCP server is shutting down")
                server = self._servers.get(agent)
                if isinstance(server, MnemoMemoryToolServer):
                    self._servers.move_to_end(agent)
                    self._using[agent] += 1
                    return server
                if server is not None:  # another call is opening it: its end says how that went
                    self._changed.wait()
                    continue
                idle = next((a for a in self._servers if not self._using[a]), None)
                if len(self._servers) < self._max_open or idle is not None:
                    break
                self._changed.wait()  # every open server is in a call: the first to end makes room
            evicted = self._servers.pop(idle) if idle is not None and len(self._servers) >= self._max_open else None
            self._using[agent] += 1  # the place is this agent's while it opens, outside the lock
            self._servers[agent] = opening = _Opening()
        if isinstance(evicted, MnemoMemoryToolServer):
            _close_client(evicted)
        try:
            client = MnemoClient(self._db, agent, readonly=self._read_only, **self._options)
            try:
                server = MnemoMemoryToolServer(client, scope=self._scope, mounts=self._mounts)
            except BaseException:
                client.close()
                raise
        except BaseException:
            with self._changed:
                if self._servers.get(agent) is opening:
                    del self._servers[agent]
                self._using[agent] -= 1
                if not self._using[agent]:
                    del self._using[agent]
                self._changed.notify_all()
            raise
        with self._changed:
            if self._servers.get(agent) is opening:
                self._servers[agent] = server
                self._changed.notify_all()
                return server
        _close_client(server)  # close() ran meanwhile
        raise Closed("the MCP server is shutting down")

    def close(self) -> None:
        with self._changed:
            self._closed = True
            servers = [s for s in self._servers.values() if isinstance(s, MnemoMemoryToolServer)]
            self._servers.clear()
            self._changed.notify_all()
        for server in servers:
            _close_client(server)


class _Opening:
    """The place of a server being opened (by the thread that asked for it first)."""


def _close_client(server: MnemoMemoryToolServer) -> None:
    try:
        server.client.close()
    except Exception:
        log.exception("closing the client of %s failed", server.client.agent_id)


def _mcp_tool(spec: ToolSpec) -> types.Tool:
    hints = spec.hints
    return types.Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description,
        input_schema=spec.input_schema,
        annotations=types.ToolAnnotations(
            title=spec.title,
            read_only_hint=hints.read_only,
            destructive_hint=hints.destructive,
            idempotent_hint=hints.idempotent,
            open_world_hint=hints.open_world,
        ),
    )


def _tool_result(result: CommandResult) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=result.text)], is_error=result.is_error)


def _run_call(pool: AgentServers, agent: str, name: str, arguments: dict[str, Any] | None) -> CommandResult:
    with contextlib.ExitStack() as held:
        try:
            server = held.enter_context(pool.serving(agent))
        except Exception as exc:
            # The reason (a path, a damaged offset) is for the operator's log, not for a remote caller.
            log.error("cannot open the memory store as %s: %s", agent, exc)
            return CommandResult("Error: The memory store cannot be opened; the server's log says why", True)
        return call_tool(server, name, arguments, read_only=pool.read_only)


def build_server(pool: AgentServers, agent_of: Callable[[], str | None]) -> Server[Any]:
    """The MCP server. `agent_of()` names the agent of the request being served (None: refuse it)."""
    tools = [_mcp_tool(spec) for spec in tools_for(pool.read_only)]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        agent = agent_of()  # here, not in the worker thread: the request's identity is a context variable
        if agent is None:
            return _tool_result(CommandResult("Error: Not authenticated", True))
        result = await anyio.to_thread.run_sync(_run_call, pool, agent, params.name, params.arguments)
        return _tool_result(result)

    return Server(
        SERVER_NAME,
        version=__version__,
        title="Mnemo memory",
        instructions=READ_ONLY_INSTRUCTIONS if pool.read_only else INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call,
    )


def _configure_logging() -> None:
    # stdout may be the protocol: whatever is logged goes to stderr.
    if not logging.getLogger().handlers:
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="mnemo mcp: %(levelname)s: %(message)s")


def _open_pool(
    db: DbArg | None, agent: str | None, scope: str | None, read_only: bool, lock_timeout: float | None,
    mounts: Mapping[str, str] | None, embedder: Embedder | str | None, max_open: int = DEFAULT_MAX_OPEN_AGENTS,
) -> tuple[DbArg, str, AgentServers]:
    """The database (default: default_db_path(), its folder made) and the server's agent (default:
    default_agent()), and the pool of the agents' servers on it, none open yet."""
    if db is None:
        path = default_db_path()
        ensure_parent(path)
        db = path
    agent = agent if agent is not None else default_agent()
    pool = AgentServers(db, scope=scope, read_only=read_only, lock_timeout=lock_timeout, mounts=mounts,
                        embedder=embedder, max_open=max_open)
    return db, agent, pool


def _describe(db: DbArg) -> str:
    return shown_name(os.fspath(db) if isinstance(db, (str, Path)) else str(db))  # a DSN's password hidden


def _served_as(mounts: Mapping[str, str] | None, read_only: bool) -> str:
    """The end of the line announcing what is served: the mounts, and whether it is read-only."""
    mounted = " ".join(f"{point}={scope}" for point, scope in sorted((mounts or {}).items()))
    return (f", mounts {mounted}" if mounted else "") + (", read-only" if read_only else "")


# -- stdio ------------------------------------------------------------------------------------------


async def _cancel_on_signals(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for _ in signals:
            scope.cancel()
            return


async def _serve_stdio(app: Server[Any]) -> None:
    async with anyio.create_task_group() as tg:
        if threading.current_thread() is threading.main_thread():
            # A stop signal cancels the session, which waits for a command in progress to commit.
            tg.start_soon(_cancel_on_signals, tg.cancel_scope)
        async with stdio_server() as (read_stream, write_stream):
            await app.run(read_stream, write_stream, app.create_initialization_options())
        tg.cancel_scope.cancel()


def serve_stdio(
    db: DbArg | None = None,
    agent: str | None = None,
    scope: str | None = None,
    read_only: bool = False,
    announce: TextIO | None = None,
    lock_timeout: float | None = None,
    mounts: Mapping[str, str] | None = None,
    embedder: Embedder | str | None = None,
) -> None:
    """Serve MCP over stdin and stdout until the client closes stdin (or a SIGTERM, SIGINT or SIGHUP).

    `db` defaults to `default_db_path()` and `agent` to `default_agent()`. The database is opened
    before the protocol starts, so one that cannot be opened raises here (a `MnemoError` or `OSError`).
    One line saying what is served goes to `announce` (stderr): stdout is the protocol's.
    `lock_timeout` (default MnemoClient's) bounds a command's wait for another writer. `mounts` (mount
    point -> scope, docs/MOUNTS.md) serves several scopes in one tree, the root's in `scope`. `embedder`
    (MnemoClient's) lets memory_search match by meaning (docs/RECALL.md §6).
    """
    _configure_logging()
    db, agent, pool = _open_pool(db, agent, scope, read_only, lock_timeout, mounts, embedder)
    try:
        server = pool.get(agent)
        print(
            f"mnemo mcp: serving {_describe(db)} as agent {agent}, scope {server.scope}"
            f"{_served_as(mounts, read_only)}, over stdio",
            file=announce or sys.stderr,
            flush=True,
        )
        anyio.run(_serve_stdio, build_server(pool, lambda: agent))
    finally:
        pool.close()


# -- streamable HTTP --------------------------------------------------------------------------------


class _BearerTokens:
    """The SDK's `TokenVerifier`: a known token authenticates its agent, as the access token's client."""

    def __init__(self, table: TokenTable) -> None:
        self._table = table

    async def verify_token(self, token: str) -> AccessToken | None:
        agent = self._table.agent_for(token)
        if agent is None:
            return None
        # The token itself is not kept on the request: nothing downstream needs it, and a log line
        # that printed the access token would then print no secret.
        return AccessToken(token="(verified)", client_id=agent, subject=agent, scopes=[])


# The names a loopback server answers to, and the origins it takes requests from (any port): the SDK's
# own for 127.0.0.1, localhost and ::1, with the address listened on added.
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def _transport_security(host: str) -> TransportSecuritySettings | None:
    """On a loopback address, the SDK's DNS-rebinding check (the Host and Origin headers) for it: the SDK
    turns it on only for 127.0.0.1, localhost and ::1, not for 127.0.0.2 or another loopback address.
    Beyond loopback, None (the SDK's default: no check; the bearer token is what guards it)."""
    if not is_loopback(host):
        return None
    names = list(dict.fromkeys([*_LOOPBACK_HOSTS, url_host(host)]))
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{name}:*" for name in names],
        allowed_origins=[f"http://{name}:*" for name in names],
    )


def _request_agent() -> str | None:
    token = get_access_token()
    return None if token is None else token.client_id


class _Stop(Exception):
    """A stop signal arrived (re-raised by uvicorn once it has shut down gracefully)."""


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop(signum)


def serve_http(
    db: DbArg | None,
    tokens: Mapping[str, str],
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    agent: str | None = None,
    scope: str | None = None,
    read_only: bool = False,
    announce: TextIO | None = None,
    lock_timeout: float | None = None,
    mounts: Mapping[str, str] | None = None,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    embedder: Embedder | str | None = None,
    max_open_agents: int = DEFAULT_MAX_OPEN_AGENTS,
) -> None:
    """Serve MCP over streamable HTTP at `http://host:port/mcp` until SIGTERM or SIGINT.

    `tokens` maps bearer tokens to agent ids (see `mnemo.tools.mcp.tokens`); a request without a
    known token is refused with 401, and each request acts as its token's agent, through one client per
    agent opened on its first request, at most `max_open_agents` at once (AgentServers says how).
    `agent` (default `default_agent()`) is the server's own identity: it opens the database at start, so
    that a database that cannot be opened raises here, and owns it if it is new. Port 0 picks a free
    port; the line announcing the URL says which.
    `mounts` (docs/MOUNTS.md) are the same for every agent; the root's scope is `scope`, else each agent's home.
    At most `max_connections` connections are open at once (fewer if the descriptor limit leaves room
    for fewer), and each must send a whole request within `read_timeout` seconds of opening or of its
    previous response (`mnemo.tools.mcp.connections` says how). `embedder`: as serve_stdio's.
    """
    _configure_logging()
    import uvicorn  # noqa: PLC0415 - the SDK depends on it; imported here so that stdio never loads it

    table = TokenTable(tokens)
    guard = ConnectionGuard(max_connections, read_timeout)  # checks both before anything opens
    db, agent, pool = _open_pool(db, agent, scope, read_only, lock_timeout, mounts, embedder, max_open_agents)
    out = announce or sys.stderr
    guard.fit_descriptors(agents=min(len(table.agents) + 1, max_open_agents))
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_stop) if in_main else None
    try:
        pool.get(agent)
        sock = bind_listener(host, port, guard)
        url = f"http://{url_host(host)}:{sock.getsockname()[1]}"
        app = build_server(pool, _request_agent).streamable_http_app(
            streamable_http_path=MCP_PATH,
            host=host,
            transport_security=_transport_security(host),
            auth=AuthSettings(issuer_url=AnyHttpUrl(url), resource_server_url=None),
            token_verifier=_BearerTokens(table),
        )
        if not is_loopback(host):
            print(
                f"mnemo mcp: warning: listening on {host}, beyond this machine, in plain HTTP: "
                "put TLS in front of it (a reverse proxy) so that bearer tokens do not cross the network in clear",
                file=out,
            )
        if guard.descriptor_limit is not None:
            print(
                f"mnemo mcp: warning: the descriptor limit (ulimit -n {guard.descriptor_limit}) leaves room for "
                f"{guard.max_connections} connections, fewer than the {max_connections} asked for",
                file=out,
            )
        agents = ", ".join(table.agents)
        where = f"scope {scope}" if scope is not None else "each agent's home scope"
        print(
            f"mnemo mcp: serving {_describe(db)} at {url}{MCP_PATH} for agents {agents}, {where}"
            f"{_served_as(mounts, read_only)}",
            file=out,
            flush=True,
        )
        config = uvicorn.Config(
            app, log_level="warning", timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS, lifespan="on",
            http=guarded_protocol(guard),
        )
        try:
            uvicorn.Server(config).run(sockets=[sock])
        except (_Stop, KeyboardInterrupt):
            pass
        finally:
            sock.close()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        pool.close()
