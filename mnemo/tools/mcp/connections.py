"""Bounds on the HTTP transport's connections: how many may be open, and how long one may take to send
a request.

uvicorn reads a request with no deadline and accepts connections until the process runs out of file
descriptors: a client that opens connections and sends half a request on each (no token needed) would
hold them all, and once the descriptors are gone no one else is even accepted. Here:

- every connection must send a whole request, headers and body, within `read_timeout` seconds of
  opening or of its previous response, else it is closed (with `408 Request Timeout` if it had sent
  part of one);
- at most `max_connections` are open at once: one more closes the connection that has waited longest
  for its request (with `503 Service Unavailable` if it had sent part of one), so that the newcomer is
  served; when every other open connection has a request in progress, the newcomer is the one closed;
- `max_connections` stays below the process's descriptor limit (RLIMIT_NOFILE, `ulimit -n`), whose
  soft value is raised towards the hard one as far as needed, and the listening socket accepts no
  connection while `max_connections + SLACK` accepted ones still hold a descriptor (one accepted then
  is closed at once), so the server never runs out of descriptors.

A connection whose request has arrived (the server is answering it, or streaming events to it) is never
closed by these bounds. They work on uvicorn's h11 protocol (`guarded_protocol` makes a subclass of it),
whatever HTTP implementation uvicorn would otherwise pick.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import math
import resource
import socket
import time
from typing import TYPE_CHECKING, Any, Protocol

from mnemo.errors import InvalidInput

if TYPE_CHECKING:
    from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "SLACK",
    "ConnectionGuard",
    "GuardedListener",
    "bind_listener",
    "check_limits",
    "guarded_protocol",
    "is_loopback",
    "url_host",
]

log = logging.getLogger("mnemo.tools.mcp")

# Accepted connections the protocol has not seen yet (asyncio accepts a burst of them before any is
# set up), and connections closed to make room whose descriptors are released on the next turn of the
# event loop: room for them above `max_connections`.
SLACK = 128
# Descriptors kept for what is not a connection: the listening socket, standard streams, the event
# loop's own, and each agent's database (its log, lock and snapshot files, or PostgreSQL connections).
RESERVED_DESCRIPTORS = 64
DESCRIPTORS_PER_AGENT = 8
MIN_CONNECTIONS = 16
WARN_EVERY_SECONDS = 60.0


def check_limits(max_connections: object, read_timeout: object) -> tuple[int, float]:
    """`(max_connections, read_timeout)` if they are a positive integer and a positive number of seconds."""
    if type(max_connections) is not int or max_connections < 1:
        raise InvalidInput(f"max_connections must be a positive integer, got {max_connections!r}")
    if (
        not isinstance(read_timeout, (int, float))
        or isinstance(read_timeout, bool)
        or not math.isfinite(read_timeout)
        or read_timeout <= 0
    ):
        raise InvalidInput(f"read_timeout must be a positive number of seconds, got {read_timeout!r}")
    return max_connections, float(read_timeout)


def _descriptor_room(wanted: int, reserve: int) -> int | None:
    """How many descriptors the soft RLIMIT_NOFILE leaves beside `reserve`, after raising it towards
    the hard limit as far as `wanted` more need; None if it leaves room for all of them."""
    need = wanted + reserve
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    infinite = resource.RLIM_INFINITY
    if soft != infinite and soft < need and (hard == infinite or hard > soft):
        raised = need if hard == infinite else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):  # pragma: no cover - refused (a sandbox): the soft limit stands
            pass
    return None if soft == infinite or soft >= need else soft - reserve


def _response(status: int, reason: str, text: str) -> bytes:
    body = (text + "\n").encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
        f"content-length: {len(body)}\r\n"
    )
    if status == 503:
        head += "retry-after: 1\r\n"
    return (head + "\r\n").encode() + body


class Connection(Protocol):
    """What the guard asks of a connection: to close while it waits for a request."""

    def close_waiting(self, status: int, reason: str, text: str) -> None: ...


class ConnectionGuard:
    """What the connections of one server share: which are open, and which wait for a request."""

    def __init__(self, max_connections: int, read_timeout: float) -> None:
        self.max_connections, self.read_timeout = check_limits(max_connections, read_timeout)
        self.asked = self.max_connections
        self.descriptor_limit: int | None = None  # the soft RLIMIT_NOFILE, when it lowered max_connections
        self.open: set[Connection] = set()
        # Connections waiting for (the rest of) a request, the one that has waited longest first.
        self.reading: dict[Connection, None] = {}
        self._held: set[socket.socket] = set()  # accepted sockets, some perhaps closed since
        self.shed = 0  # open connections closed to make room
        self.refused = 0  # connections closed as soon as accepted
        self._reported = (0, 0)
        self._warned_at: float | None = None

    @property
    def ceiling(self) -> int:
        """How many accepted connections may hold a descriptor at once."""
        return self.max_connections + SLACK

    def fit_descriptors(self, agents: int) -> None:
        """Lower `max_connections` to what the descriptor limit leaves room for, beside what the
        server keeps for itself and `agents` databases; InvalidInput if that is too few."""
        reserve = RESERVED_DESCRIPTORS + DESCRIPTORS_PER_AGENT * agents
        room = _descriptor_room(self.asked + SLACK, reserve)
        if room is None:
            return
        if room - SLACK < MIN_CONNECTIONS:
            raise InvalidInput(
                f"the descriptor limit (ulimit -n) is {room + reserve}, which leaves room for "
                f"{max(room - SLACK, 0)} connections beside the {reserve + SLACK} descriptors the server keeps "
                f"for itself: raise it to at least {reserve + SLACK + MIN_CONNECTIONS}"
            )
        self.max_connections = room - SLACK
        self.descriptor_limit = room + reserve

    def hold(self, conn: socket.socket) -> bool:
        """Whether a connection just accepted may stay (it then counts until it is closed)."""
        if len(self._held) >= self.ceiling:
            self._held = {s for s in self._held if s.fileno() != -1}
            if len(self._held) >= self.ceiling:
                self.refused += 1
                self._warn()
                return False
        self._held.add(conn)
        return True

    def admit(self, newcomer: Connection) -> None:
        """Make room for a connection just set up: over the limit, close the one that has waited
        longest for its request (the newcomer itself when every other one has a request in progress)."""
        self.open.add(newcomer)
        if len(self.open) <= self.max_connections:
            return
        oldest = next(iter(self.reading), newcomer)
        self.shed += 1
        oldest.close_waiting(
            503, "Service Unavailable",
            f"The server has {self.max_connections} connections open, its limit; try again.",
        )
        self._warn()

    def _warn(self) -> None:
        now = time.monotonic()
        n = self.max_connections
        limit = f"{n} connection{'s' if n != 1 else ''} open, the limit (--max-connections)"
        if self._warned_at is None:
            log.warning(
                "%s: each new one now closes the one that has waited longest for its request (counts follow at "
                "most once a minute)", limit,
            )
        elif now - self._warned_at >= WARN_EVERY_SECONDS:
            log.warning(
                "in the last %.0f s, %d connections were closed at the limit and %d as soon as accepted (%s)",
                now - self._warned_at, self.shed - self._reported[0], self.refused - self._reported[1], limit,
            )
        else:
            return
        self._warned_at, self._reported = now, (self.shed, self.refused)


class GuardedListener(socket.socket):
    """The listening socket: a connection accepted while `guard.ceiling` accepted ones still hold a
    descriptor is closed at once, and asyncio is told there is nothing more to accept this turn."""

    guard: ConnectionGuard | None = None

    def accept(self) -> tuple[socket.socket, Any]:
        conn, address = super().accept()
        if self.guard is not None and not self.guard.hold(conn):
            conn.close()
            raise BlockingIOError(errno.EAGAIN, "the server holds as many connections as it may")
        return conn, address


def guarded_protocol(guard: ConnectionGuard) -> type[H11Protocol]:
    """A protocol class for `uvicorn.Config(http=...)`: uvicorn's h11 protocol, its connections under
    the bounds of `guard`. (uvicorn is imported here, not with this module: stdio never loads it.)"""
    import h11  # noqa: PLC0415 - the HTTP server's dependencies: stdio never loads them
    from uvicorn.config import Config  # noqa: PLC0415 - as above
    from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: PLC0415 - as above
    from uvicorn.server import ServerState  # noqa: PLC0415 - as above

    class GuardedProtocol(H11Protocol):
        def __init__(
            self, config: Config, server_state: ServerState, app_state: dict[str, Any],
            _loop: asyncio.AbstractEventLoop | None = None,
        ) -> None:
            super().__init__(config, server_state, app_state, _loop)
            self._deadline: asyncio.TimerHandle | None = None

        # -- the protocol's events --------------------------------------------------------------

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._sync()
            guard.admit(self)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._sync()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._sync()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_reading()
            guard.open.discard(self)
            super().connection_lost(exc)

        # -- the bounds --------------------------------------------------------------------------

        def _sync(self) -> None:
            """Start or stop the request's deadline as the connection starts or stops waiting for one."""
            waiting = not self.transport.is_closing() and self.conn.their_state in (h11.IDLE, h11.SEND_BODY)
            if not waiting:
                self._stop_reading()
            elif self._deadline is None:
                guard.reading[self] = None
                self._deadline = self.loop.call_later(guard.read_timeout, self._timed_out)

        def _stop_reading(self) -> None:
            guard.reading.pop(self, None)
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _timed_out(self) -> None:
            self._deadline = None
            self.close_waiting(
                408, "Request Timeout",
                f"The request did not arrive whole within {guard.read_timeout:g} s of the connection being "
                "ready for it; send each request at once.",
            )

        def close_waiting(self, status: int, reason: str, text: str) -> None:
            """Close this connection, which waits for a request: with a response saying why if part of
            one arrived (nothing else is being answered on it then), silently if it is idle."""
            self._stop_reading()
            guard.open.discard(self)
            if self.transport.is_closing():
                return
            partial = self.conn.their_state is h11.SEND_BODY or bool(self.conn.trailing_data[0])
            cycle = self.cycle
            answering = cycle is not None and cycle.response_started and not cycle.response_complete
            if partial and not answering:
                self.transport.write(_response(status, reason, text))
            self.transport.close()

    return GuardedProtocol


def is_loopback(host: str) -> bool:
    """Whether `host` is `localhost` or a loopback address: a server there is reachable from this machine
    only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_listener(host: str, port: int, guard: ConnectionGuard) -> socket.socket:
    """A listening socket on `host`:`port` (0: a free port) whose accepts `guard` bounds."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = GuardedListener(family, kind, proto)
    sock.guard = guard
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        sock.set_inheritable(True)
    except BaseException:
        sock.close()
        raise
    return sock


def url_host(host: str) -> str:
    """`host` as a URL writes it (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host
