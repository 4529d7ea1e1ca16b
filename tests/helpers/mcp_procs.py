"""Start `mnemo mcp` servers in their own processes and talk to them with the MCP SDK's own clients."""

from __future__ import annotations

import re
import resource
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TextIO

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from helpers.procs import subprocess_env

TIMEOUT = 30.0  # for any one session or process step: a hang fails the test instead of stalling the run


def mcp_argv(*args: str) -> list[str]:
    """The command line of `mnemo mcp ARGS...` (as `python -m mnemo`, the same command)."""
    return [sys.executable, "-m", "mnemo", "mcp", *args]


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = subprocess_env()
    env.pop("MNEMO_AGENT", None)
    env.pop("MNEMO_MCP_TOKENS", None)
    env.update(extra or {})
    return env


@asynccontextmanager
async def stdio_session(
    *args: str, env: dict[str, str] | None = None, errlog: TextIO | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized client session with `mnemo mcp ARGS...` over stdio; the process ends with it."""
    argv = mcp_argv(*args)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=server_env(env))
    async with (
        stdio_client(params, errlog=errlog or sys.stderr) as (read, write),
        ClientSession(read, write, read_timeout_seconds=TIMEOUT) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def http_session(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else None
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, read_timeout_seconds=TIMEOUT) as session,
    ):
        await session.initialize()
        yield session


def text_of(result: Any) -> str:
    """The one text block of a tool result."""
    (block,) = result.content
    assert block.type == "text"
    text: str = block.text
    return text


class StderrLines:
    """Collects a process's stderr on a thread, so that it never blocks on a full pipe."""

    def __init__(self, stream: TextIO) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: TextIO) -> None:
        for line in stream:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()

    def wait_for(self, pattern: str, timeout: float = TIMEOUT) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        with self._cond:
            while True:
                for line in self.lines:
                    match = regex.search(line)
                    if match:
                        return match
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive() and not self._cond.wait(0):
                    raise AssertionError(f"no stderr line matching {pattern!r}; got {self.lines!r}")
                self._cond.wait(min(left, 0.1))

    @property
    def text(self) -> str:
        self._thread.join(timeout=5)
        with self._cond:
            return "".join(self.lines)


def lowered_nofile(limit: int | None) -> Callable[[], None] | None:
    """For Popen's preexec_fn: the child's descriptor limit, soft and hard, set to `limit`."""
    if limit is None:
        return None

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return lower


@contextmanager
def http_server(
    *args: str, env: dict[str, str] | None = None, nofile: int | None = None, host: str = "127.0.0.1"
) -> Iterator[tuple[str, subprocess.Popen[str], StderrLines]]:
    """`mnemo mcp --transport http --host HOST --port 0 ARGS...`; yields (the /mcp URL, the process, its
    stderr). `nofile`: the server's descriptor limit (RLIMIT_NOFILE, soft and hard)."""
    proc = subprocess.Popen(
        mcp_argv("--transport", "http", "--host", host, "--port", "0", *args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=server_env(env),
        preexec_fn=lowered_nofile(nofile),
    )
    try:
        assert proc.stderr is not None
        stderr = StderrLines(proc.stderr)
        url = stderr.wait_for(rf" at (http://{re.escape(host)}:\d+/mcp) ").group(1)
        yield url, proc, stderr
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[str]) -> None:
    """Ask a server process to stop, and kill it if it does not within the timeout."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def run_async(fn: Any, *args: Any, timeout: float = 60.0) -> Any:
    """Run an async test body under a deadline."""

    async def bounded() -> Any:
        with anyio.fail_after(timeout):
            return await fn(*args)

    return anyio.run(bounded)


def db_files(db: Path) -> dict[str, bytes]:
    """Every file of a database (log, lock, snapshot), by name: to show that something changed nothing."""
    return {p.name: p.read_bytes() for p in sorted(db.parent.glob(db.name + "*"))}
