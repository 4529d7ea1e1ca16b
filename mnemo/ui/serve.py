"""`serve(client, ...)`: the UI over HTTP with uvicorn until Ctrl-C or SIGTERM (what `mnemo ui` runs).

It listens on loopback unless told otherwise, prints the address (its secret prefix, the token) on
`out` (and, beyond loopback, a warning of what that exposes), opens a browser there if asked, and logs
each request without its query string and with its secret prefix hidden: both are printed once, and
never logged.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import webbrowser
from collections.abc import Mapping
from typing import Any, TextIO

import uvicorn

from ..client import MnemoClient
from ..storage.contract import shown_name
from ..tools.mcp.connections import ConnectionGuard, bind_listener, guarded_protocol, is_loopback, url_host
from .app import create_app
from .security import Guard

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 0  # a free port, printed
MAX_CONNECTIONS = 64
READ_TIMEOUT = 30.0


SHOWN_PREFIX = "/u/..."
"""What the access log shows for the server's secret prefix."""


class NoQueryString(logging.Filter):
    """uvicorn's access log line without the query string of the request: its path alone, with the
    server's secret `prefix` (if given) shown as SHOWN_PREFIX: neither secret is written to a log, which
    may be kept where the printed address is not."""

    def __init__(self, prefix: str = "") -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            path = args[2].split("?", 1)[0]
            if self.prefix and (path == self.prefix or path.startswith(self.prefix + "/")):
                path = SHOWN_PREFIX + path[len(self.prefix) :]
            record.args = (args[0], args[1], path, args[3], args[4])
        return True


def log_config(stream: str = "ext://sys.stderr", prefix: str = "") -> dict[str, Any]:
    """uvicorn's logging: its messages and one access line per request, on standard error, each
    request's path without its query and with `prefix` hidden (NoQueryString)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"no_query": {"()": NoQueryString, "prefix": prefix}},
        "formatters": {
            "default": {"()": "uvicorn.logging.DefaultFormatter", "fmt": "mnemo ui: %(message)s",
                        "use_colors": False},
            "access": {"()": "uvicorn.logging.AccessFormatter", "use_colors": False,
                       "fmt": 'mnemo ui: %(client_addr)s "%(request_line)s" %(status_code)s'},
        },
        "handlers": {
            "default": {"formatter": "default", "class": "logging.StreamHandler", "stream": stream},
            "access": {"formatter": "access", "class": "logging.StreamHandler", "stream": stream,
                       "filters": ["no_query"]},
        },
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
        },
    }


def exposure_warning(host: str, port: int, agent: str) -> str:
    """What listening on `host` beyond loopback exposes, said plainly."""
    return (
        f"mnemo ui: warning: listening on {host}:{port}, beyond this machine: whoever can reach that address and "
        f"holds the token may read every memory {agent} may read, see its history, and forget what {agent} may "
        "forget; the token and every page cross the network in plain HTTP (no TLS), readable by anyone on the way"
    )


class _Stop(Exception):
    """SIGTERM arrived (re-raised by uvicorn once it has shut down)."""


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop(signum)


def serve(
    client: MnemoClient,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    mounts: Mapping[str, str] | None = None,
    open_browser: bool = False,
    out: TextIO | None = None,
    guard: Guard | None = None,
) -> None:
    """Serve the UI over `client` (as its agent, with `mounts`) at http://host:port until Ctrl-C or
    SIGTERM. The address printed on `out` (default: standard output) carries the secret prefix and the
    token (`guard`'s, new ones if None); `open_browser` opens it with the webbrowser module, or says on
    standard error, with the address, that no browser could be started."""
    out = out if out is not None else sys.stdout
    guard = guard if guard is not None else Guard()
    limits = ConnectionGuard(MAX_CONNECTIONS, READ_TIMEOUT)
    sock = bind_listener(host, port, limits)
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_stop) if in_main else None
    try:
        bound = sock.getsockname()[1]
        names = [f"{url_host(host)}:{bound}"] + ([f"localhost:{bound}"] if is_loopback(host) else [])
        app = create_app(client, guard=guard, mounts=mounts, hosts=None if not is_loopback(host) else names)
        url = f"http://{url_host(host)}:{bound}{guard.prefix}/?token={guard.token}"
        if not is_loopback(host):
            print(exposure_warning(host, bound, client.agent_id), file=sys.stderr, flush=True)
        print(f"mnemo ui: {shown_name(client.path)} as {client.agent_id} at {url}", file=out, flush=True)
        print("mnemo ui: Ctrl-C stops it", file=out, flush=True)
        if open_browser and not webbrowser.open(url):
            # webbrowser answers False when no browser could be started (no display, none installed):
            # said, or --open would do nothing without a word.
            print(f"mnemo ui: --open: no browser could be started here: open {url} in one", file=sys.stderr,
                  flush=True)
        config = uvicorn.Config(app, log_config=log_config(prefix=guard.prefix), lifespan="off", server_header=False,
                                http=guarded_protocol(limits))
        with contextlib.suppress(_Stop, KeyboardInterrupt):
            uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
