"""`mnemo mcp --transport http`: bearer tokens authenticate agents; no token or a wrong one gets 401.

Only on 127.0.0.1, on a port the server picks itself (`--port 0`) and announces on stderr.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import httpx2  # noqa: E402

from mnemo import MnemoClient  # noqa: E402
from mnemo.storage.contract import shown_name  # noqa: E402
from tests.helpers.mcp_procs import (  # noqa: E402
    TIMEOUT,
    http_server,
    http_session,
    mcp_argv,
    run_async,
    server_env,
    text_of,
)

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef-xyz"
OWNER = "operator"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.txt"
    path.write_text(f"# remote agents\n{ALICE} alice\n\n{BOB} bob the builder\n")
    path.chmod(0o600)
    return path


def post(url: str, token: str | None, body: dict[str, Any] = INITIALIZE) -> httpx2.Response:
    headers = dict(HEADERS)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx2.post(url, json=body, headers=headers, timeout=TIMEOUT)


def test_no_token_or_a_wrong_one_is_refused_with_401(db: str) -> None:
    env = {"MNEMO_MCP_TOKENS": f'{{"{ALICE}": "alice", "{BOB}": "bob"}}'}  # JSON, from the environment
    with http_server("--db", str(db), "--agent", OWNER, env=env) as (url, _, stderr):
        with MnemoClient(db, OWNER, readonly=True) as reader:
            head = reader.head
        refused = [
            post(url, None),
            post(url, "wrong-token-0123456789abcdef"),
            post(url, ALICE[:-1]),  # a prefix of a real token
            post(url, ALICE + "x"),
            post(url, ALICE.upper()),
        ]
        basic_auth = {**HEADERS, "Authorization": f"Basic {ALICE}"}
        basic = httpx2.post(url, json=INITIALIZE, headers=basic_auth, timeout=TIMEOUT)
        call = post(url, "wrong-token-0123456789abcdef", {
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "memory_create", "arguments": {"path": "/memories/x", "file_text": "x"}},
        })
        accepted = post(url, ALICE)
        # A session belongs to the token's agent: bob cannot ride on alice's session id.
        session = {"Mcp-Session-Id": accepted.headers["mcp-session-id"]}
        listing = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}
        hijack = httpx2.post(url, json=listing, headers={**HEADERS, **session, "Authorization": f"Bearer {BOB}"},
                             timeout=TIMEOUT)
        with MnemoClient(db, OWNER, readonly=True) as reader:
            assert reader.head == head  # nothing was written by any refused request
    for response in [*refused, basic, call]:
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith('Bearer error="invalid_token"')
        assert response.json()["error"] == "invalid_token"
    assert accepted.status_code == 200
    assert hijack.status_code == 404
    # Tokens are never logged.
    assert ALICE not in stderr.text and BOB not in stderr.text
    assert "wrong-token" not in stderr.text


def test_two_tokens_are_two_agents_with_separate_memories(db: str, tokens_file: Path) -> None:

    async def body(url: str) -> list[str]:
        out = []
        async with http_session(url, ALICE) as alice, http_session(url, BOB) as bob:
            for session, tool, args in [
                (alice, "memory_create", {"path": "/memories/plan.md", "file_text": "alice's plan\n"}),
                (bob, "memory_view", {"path": "/memories"}),
                (bob, "memory_view", {"path": "/memories/plan.md"}),
                (bob, "memory_create", {"path": "/memories/plan.md", "file_text": "bob's plan\n"}),
                (alice, "memory_view", {"path": "/memories/plan.md"}),
                (bob, "memory_view", {"path": "/memories/plan.md"}),
                (bob, "memory_delete", {"path": "/memories/plan.md"}),
                (alice, "memory_view", {"path": "/memories"}),
            ]:
                result = await session.call_tool(tool, args)
                out.append(("E " if result.is_error else "") + text_of(result))
        return out

    with http_server("--db", str(db), "--agent", OWNER, "--tokens", str(tokens_file)) as (url, proc, stderr):
        stderr.wait_for(f"mnemo mcp: serving {re.escape(shown_name(db))} at {url} for agents alice, bob the builder, "
                        "each agent's home scope$")
        results = run_async(body, url)
    assert results == [
        "File created successfully at: /memories/plan.md",
        "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items and "
        "node_modules:\n0B\t/memories",
        "E The path /memories/plan.md does not exist. Please provide a valid path.",
        "File created successfully at: /memories/plan.md",
        "Here's the content of /memories/plan.md with line numbers:\n     1\talice's plan\n     2\t",
        "Here's the content of /memories/plan.md with line numbers:\n     1\tbob's plan\n     2\t",
        "Successfully deleted /memories/plan.md",
        "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items and "
        "node_modules:\n13B\t/memories\n13B\t/memories/plan.md",
    ]
    # The server stopped cleanly on SIGTERM and the chain says who wrote what, as which agent.
    assert proc.returncode == 0
    with MnemoClient(db, OWNER) as owner:  # the server's own agent opened the new database: it owns it
        records = owner.query()
        assert [(r.scope, r.agent_id, r.content) for r in records] == [("agent:alice", "alice", "alice's plan\n")]
        assert owner.verify().ok


def test_http_needs_tokens_and_refuses_bad_ones(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    cases: list[tuple[list[str], dict[str, str], str]] = [
        ([], {}, "the HTTP transport needs bearer tokens: --tokens FILE or $MNEMO_MCP_TOKENS"),
        ([], {"MNEMO_MCP_TOKENS": "short alice"}, "$MNEMO_MCP_TOKENS: line 1: a token must be at least 16 characters"),
        (["--tokens", str(tmp_path / "missing.txt")], {}, "cannot read the tokens file"),
    ]
    for args, env, message in cases:
        proc = subprocess.run(
            mcp_argv("--db", str(db), "--transport", "http", "--port", "0", *args),
            stdin=subprocess.DEVNULL, capture_output=True, text=True, env=server_env(env), timeout=TIMEOUT,
        )
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr
        assert "short" not in proc.stderr  # not even a refused token is echoed
    assert not db.exists()
