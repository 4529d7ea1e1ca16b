"""`mnemo mcp`: the database as an MCP server, over stdio or streamable HTTP (mnemo.tools.mcp does the
work). No output on stdout but the protocol's: what is served is said on stderr."""

from __future__ import annotations

import contextlib
import gc
import math
import os
from collections.abc import Iterator

import click

from ..errors import IntegrityError, NotFound
from ..recall.embedding import Embedder
from ..tools.mcp.defaults import (
    DEFAULT_AGENT,
    DEFAULT_HOST,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_OPEN_AGENTS,
    DEFAULT_PORT,
    DEFAULT_READ_TIMEOUT,
)
from ..tools.mcp.tokens import TOKENS_ENV, load_tokens
from .errors import EXIT_OK, Failure, UsageError
from .options import CONTEXT_SETTINGS, embedder_option, lock_timeout_option, mount_table, valid_agent
from .output import examples, json_option


def _agent(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
    if value is not None:
        return valid_agent(value, "--agent")
    env = os.environ.get("MNEMO_AGENT")
    if env is not None:  # set, even if empty: an empty one is an error, as for every command
        return valid_agent(env, "$MNEMO_AGENT")
    return DEFAULT_AGENT


def _positive_seconds(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    """A finite, positive number of seconds."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise click.BadParameter(f"expected a finite, positive number of seconds, got {value!r}")
    return seconds


@contextlib.contextmanager
def _opening(db: str | None) -> Iterator[None]:
    """The library's errors on opening the database, worded as every command words them."""
    name = db if db is not None else "the default database"
    try:
        yield
    except IntegrityError as exc:
        raise Failure(f"{exc} (run `mnemo verify {name}` for the full report)", "IntegrityError") from None
    except NotFound as exc:
        raise UsageError(f"cannot open {name}: {exc}", "NotAMnemoDatabase") from None


@click.command(
    "mcp", context_settings=CONTEXT_SETTINGS,
    short_help="serve the database as an MCP server (stdio, or HTTP with bearer tokens)",
    epilog=examples(
        "mnemo mcp --db ~/memory.mnemo.db --agent claude-code",
        "claude mcp add mnemo -- mnemo mcp --db ~/memory.mnemo.db --agent claude-code",
        "mnemo mcp --read-only --scope team:notes",
        "mnemo mcp --mount /memories/team=team:research --mount /memories/org=org:handbook",
        "mnemo mcp --transport http --port 8765 --tokens ~/.config/mnemo/tokens   # lines: TOKEN AGENT",
        "mnemo mcp --embedder local   # memory_search finds by meaning too (the `semantic` extra)",
    ),
)
@click.option("--db", metavar="DB",
              help="the database (default: $XDG_DATA_HOME/mnemo/memory.mnemo.db, else ~/.local/share/mnemo/...; "
                   "on macOS ~/Library/Application Support/mnemo/...)")
@click.option("--agent", metavar="AGENT", callback=_agent,
              help=f"serve as this agent (default: $MNEMO_AGENT, else {DEFAULT_AGENT}); over HTTP, the server's "
                   "own agent, which opens the database (and owns it if it is new)")
@click.option("--scope", metavar="SCOPE", help="serve this scope (default: each agent's home, agent:AGENT)")
@click.option("--mount", "mounts", metavar="POINT=SCOPE", multiple=True, callback=mount_table,
              help="also serve SCOPE at POINT, such as /memories/team=team:research (repeatable; "
                   "docs/MOUNTS.md); a mount the agent may not read is not shown")
@click.option("--read-only", "read_only", is_flag=True,
              help="open the database read-only and offer only memory_view, memory_search, memory_history and "
                   "memory_verify")
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True,
              help="stdio for one client that starts the server; http (streamable) for remote agents")
@click.option("--host", metavar="HOST", help=f"HTTP: the address to listen on (default: {DEFAULT_HOST})")
@click.option("--port", metavar="N", type=click.IntRange(0, 65535),
              help=f"HTTP: the port (default: {DEFAULT_PORT}; 0 picks a free one, announced on stderr)")
@click.option("--tokens", metavar="FILE",
              help=f"HTTP: bearer tokens, lines `TOKEN AGENT` (a # at a line's start or after whitespace starts a "
                   f"comment) or a JSON object (default: ${TOKENS_ENV})")
@click.option("--max-connections", "max_connections", metavar="N", type=click.IntRange(1),
              help=f"HTTP: connections open at once (default: {DEFAULT_MAX_CONNECTIONS}, fewer if `ulimit -n` "
                   "leaves room for fewer); one more closes the one that has waited longest for its request")
@click.option("--max-open-agents", "max_open_agents", metavar="N", type=click.IntRange(1),
              help=f"HTTP: agents whose database client is open at once (default: {DEFAULT_MAX_OPEN_AGENTS}); one "
                   "more closes the one served longest ago that no call is using")
@click.option("--read-timeout", "read_timeout", metavar="SECONDS", callback=_positive_seconds,
              help=f"HTTP: a connection must send a whole request within this many seconds of opening or of "
                   f"its previous response, else it is closed (default: {DEFAULT_READ_TIMEOUT:g})")
@embedder_option(help_text="memory_search matches by meaning too (hybrid by default), with this embedder: `local` "
                           "(the model of the `semantic` extra) or `module:attribute`, an object with name, "
                           "dimension and embed(texts) or a factory of one (docs/RECALL.md §6)")
@lock_timeout_option
@json_option
def mcp(
    db: str | None, agent: str, scope: str | None, mounts: dict[str, str] | None, read_only: bool, transport: str,
    host: str | None,
    port: int | None, tokens: str | None, max_connections: int | None, max_open_agents: int | None,
    read_timeout: float | None,
    embedder: Embedder | None, lock_timeout: float | None, as_json: bool,
) -> int:
    """Serve the database as an MCP server: the memory tool's six commands (memory_view, memory_create,
    memory_str_replace, memory_insert, memory_delete, memory_rename), memory_search, memory_history and
    memory_verify, as AGENT in its home scope (or SCOPE), with each --mount's scope at its mount point. Over stdio until
    the client closes the connection; over HTTP, each request authenticated by its bearer token and served
    as that token's agent, until SIGTERM or Ctrl-C. Several servers may share one database: no edit is
    lost. --embedder local (or module:attribute): memory_search matches by meaning too. --json: errors as
    one JSON object on stderr (stdout is the protocol's)."""
    http_only = (("--host", host), ("--port", port), ("--tokens", tokens), ("--max-connections", max_connections),
                 ("--max-open-agents", max_open_agents), ("--read-timeout", read_timeout))
    given = [name for name, value in http_only if value is not None]
    if transport == "stdio" and given:
        raise UsageError(f"{', '.join(given)}: only with --transport http")
    table = load_tokens(tokens) if transport == "http" else {}  # before anything opens: no tokens, no server
    try:
        from ..tools.mcp import app  # noqa: PLC0415 - needs the optional mcp extra, which this reports
    except ImportError as exc:
        raise UsageError(str(exc), "MissingDependency") from None
    with _opening(db):
        if transport == "stdio":
            app.serve_stdio(db, agent, scope, read_only, lock_timeout=lock_timeout, mounts=mounts, embedder=embedder)
        else:
            app.serve_http(
                db, table, host=host if host is not None else DEFAULT_HOST,
                port=port if port is not None else DEFAULT_PORT, agent=agent, scope=scope, read_only=read_only,
                lock_timeout=lock_timeout, mounts=mounts,
                max_connections=max_connections if max_connections is not None else DEFAULT_MAX_CONNECTIONS,
                read_timeout=read_timeout if read_timeout is not None else DEFAULT_READ_TIMEOUT,
                embedder=embedder,
                max_open_agents=max_open_agents if max_open_agents is not None else DEFAULT_MAX_OPEN_AGENTS,
            )
    gc.freeze()  # the process ends next: skip a final collection of the SDK's large object graph (~1 s)
    return EXIT_OK


def register(root: click.Group) -> None:
    root.add_command(mcp)
