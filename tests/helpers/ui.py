"""What the UI's tests share: the constants of their app, the memory tool's writes the pages are checked
against, and the session's CSRF token."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.testclient import TestClient

    from mnemo.tools.server import MnemoMemoryToolServer
    from mnemo.ui import Guard

OWNER = "alice"
TOKEN = "test-token-0123456789"
ORIGIN = "http://testserver"
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
