"""examples/mcp_client.py runs as documented: the SDK's client drives `mnemo mcp` over stdio, on a
database of either backend."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("mcp")

from helpers.mcp_procs import server_env  # noqa: E402
from helpers.paths import ROOT

from mnemo.storage.contract import shown_name  # noqa: E402

EXAMPLE = ROOT / "examples" / "mcp_client.py"


def test_the_mcp_client_example(db: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), str(db)], stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=60, env=server_env(),
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith(
        "tools: memory_view, memory_create, memory_str_replace, memory_insert, memory_delete, memory_rename, "
        "memory_search, memory_history, memory_verify\n"
    )
    assert "> memory_create {'path': '/memories/user.md', 'file_text': 'The user prefers trains.\\n'}\n" \
           "File created successfully at: /memories/user.md\n" in out
    assert "     1\tThe user prefers night trains.\n" in out
    assert "History of /memories/user.md: 2 versions, oldest first\n" in out
    assert "[error]\nError: Path /memories/../etc/passwd would escape /memories directory\n" in out
    assert "OK: the chain is intact: 3 entries verified\n" in out
    assert f"mnemo mcp: serving {shown_name(db)} as agent example, scope agent:example, over stdio" in proc.stderr
