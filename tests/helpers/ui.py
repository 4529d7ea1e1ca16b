"""What the UI's tests share: the constants of their app, the memory tool's writes the pages are checked
against, and the session's CSRF token."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.testclient import TestClient

    from mnemo.tools.server import MnemoMemoryToolServer
    from mnemo.ui import Guard

OWNER = "alice"
TOKEN = "test-token-0123456789"
ORIGIN = "http://testserver"
PREFIX = "/u/" + "0123456789abcdef" * 2
"""The tests' secret prefix: every page of their app is under it."""
APP = ORIGIN + PREFIX
"""The base URL the tests' clients are made with: `web.get("/memories")` asks for PREFIX/memories."""
SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(2)>'


def create(tool: MnemoMemoryToolServer, path: str, text: str) -> None:
    """Create a file, as the model's tool call would."""
    result = tool.execute({"command": "create", "path": path, "file_text": text})
    assert not result.is_error, result.text


def edit(tool: MnemoMemoryToolServer, path: str, old: str, new: str) -> None:
    """A new version of a file: `old` replaced by `new`."""
    result = tool.execute({"command": "str_replace", "path": path, "old_str": old, "new_str": new})
    assert not result.is_error, result.text


def csrf(guard: Guard, web: TestClient) -> str:
    """The CSRF token of the test client's session (the one its cookie names)."""
    token = guard.csrf_of(web.cookies[guard.cookie])
    assert token is not None
    return token


class Served:
    """`mnemo ui` running in its own process, as a user starts it: its address (with the secret prefix and
    the token, from the line it prints) and, once stopped, its standard error."""

    def __init__(self, db: str, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mnemo", "ui", "--db", db, "--agent", OWNER, "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        assert self.proc.stdout is not None
        self.line = self.proc.stdout.readline()
        match = re.search(r" at (http://(\S+?):(\d+)(/u/[0-9a-f]{32})/\?token=(\S+))$", self.line.strip())
        if match is None:
            self.stop()
            raise AssertionError(f"mnemo ui printed {self.line!r}; stderr: {self.err!r}")
        self.url, self.host, self.port = match.group(1), match.group(2), int(match.group(3))
        self.prefix, self.token = match.group(4), match.group(5)
        self.err = ""

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base(self) -> str:
        """Where its pages are: the origin and the secret prefix."""
        return self.origin + self.prefix

    def stop(self) -> str:
        """SIGTERM, as a service manager stops it; its standard error."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, self.err = self.proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, self.err = self.proc.communicate()
        return self.err
