"""`mnemo mcp --transport http`: bearer tokens authenticate agents; no token or a wrong one gets 401.

Only on 127.0.0.1, on a port the server picks itself (`--port 0`) and announces on stderr.
"""

from __future__ import annotations

import contextlib
import re
import resource
import selectors
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio  # noqa: E402
import httpx2  # noqa: E402
from helpers.mcp_procs import (  # noqa: E402
    TIMEOUT,
    http_server,
    http_session,
    lowered_nofile,
    mcp_argv,
    run_async,
    server_env,
    text_of,
)

from mnemo import MnemoClient  # noqa: E402
from mnemo.errors import InvalidInput  # noqa: E402
from mnemo.storage.contract import shown_name  # noqa: E402
from mnemo.tools.mcp.tools import TOOLS  # noqa: E402

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef-xyz"
OWNER = "operator"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
NOT_SHOWN = "not shown: the chain's length and head, its erasures and other scopes: the whole report needs admin on *"
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.txt"
    path.write_text(f"# remote agents\n{ALICE} alice # laptop\n\n{BOB} bob the builder\n")
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
                (bob, "memory_verify", {}),  # a token agent is not the owner: a check of what it can read
                (alice, "memory_verify", {}),
            ]:
                result = await session.call_tool(tool, args)
                out.append(("E " if result.is_error else "") + text_of(result))
            listed = (await bob.list_tools()).tools
            out.append(next(tool.description or "" for tool in listed if tool.name == "memory_verify"))
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
        "OK: the chain is intact; this check covers the 0 versions of the 0 records you can read "
        f"(scope agent:bob the builder)\n{NOT_SHOWN}",
        "OK: the chain is intact; this check covers the 1 version of the 1 record you can read "
        f"(scope agent:alice)\n{NOT_SHOWN}",
        next(tool.description for tool in TOOLS if tool.name == "memory_verify"),
    ]
    # The server stopped cleanly on SIGTERM and the chain says who wrote what, as which agent.
    assert proc.returncode == 0
    with MnemoClient(db, OWNER) as owner:  # the server's own agent opened the new database: it owns it
        records = owner.query()
        assert [(r.scope, r.agent_id, r.content) for r in records] == [("agent:alice", "alice", "alice's plan\n")]
        assert owner.verify().ok


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2"])
def test_on_loopback_another_host_name_or_a_web_pages_origin_is_refused(db: str, host: str) -> None:
    # A page of another site whose name is made to resolve to a loopback address (DNS rebinding) comes
    # with its own name in Host, and a page in the browser with its Origin: refused, even with a token.
    env = {"MNEMO_MCP_TOKENS": f"{ALICE} alice"}
    with http_server("--db", str(db), "--agent", OWNER, env=env, host=host) as (url, _, _stderr):
        port = port_of(url)
        with MnemoClient(db, OWNER, readonly=True) as reader:
            head = reader.head

        def sent(**extra: str) -> httpx2.Response:
            headers = {**HEADERS, "Authorization": f"Bearer {ALICE}", **extra}
            return httpx2.post(url, json=INITIALIZE, headers=headers, timeout=TIMEOUT)

        rebound = sent(Host=f"rebound.example:{port}")
        from_page = sent(Origin="http://evil.example")
        accepted = [sent(), sent(Host=f"localhost:{port}"), sent(Origin=f"http://{host}:{port}"),
                    sent(Origin="http://localhost:6274")]
        with MnemoClient(db, OWNER, readonly=True) as reader:
            assert reader.head == head
    assert (rebound.status_code, rebound.text) == (421, "Invalid Host header")
    assert (from_page.status_code, from_page.text) == (403, "Invalid Origin header")
    assert [r.status_code for r in accepted] == [200, 200, 200, 200]


def test_http_needs_tokens_and_refuses_bad_ones(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    cases: list[tuple[list[str], dict[str, str], str]] = [
        ([], {}, "the HTTP transport needs bearer tokens: --tokens FILE or $MNEMO_MCP_TOKENS"),
        ([], {"MNEMO_MCP_TOKENS": "short alice"}, "$MNEMO_MCP_TOKENS: line 1: a token must be at least 16 characters"),
        (["--tokens", str(tmp_path / "missing.txt")], {}, "cannot read the tokens file"),
        ([], {"MNEMO_MCP_TOKENS": f'{{"{ALICE}": "alice", "{ALICE}": "mallory"}}'},
         "$MNEMO_MCP_TOKENS: entry 2: this token is listed twice (first at entry 1): list each token once"),
    ]
    for args, env, message in cases:
        proc = subprocess.run(
            mcp_argv("--db", str(db), "--transport", "http", "--port", "0", *args),
            stdin=subprocess.DEVNULL, capture_output=True, text=True, env=server_env(env), timeout=TIMEOUT,
        )
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr
        assert "short" not in proc.stderr and ALICE not in proc.stderr  # not even a refused token is echoed
    assert not db.exists()
    # Too few descriptors for the connections the server must keep room for: said before anything opens.
    proc = subprocess.run(
        mcp_argv("--db", str(db), "--transport", "http", "--port", "0"), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, env=server_env({"MNEMO_MCP_TOKENS": f"{ALICE} alice"}), timeout=TIMEOUT,
        preexec_fn=lowered_nofile(200),
    )
    assert (proc.returncode, proc.stderr) == (2, (
        "mnemo: error: the descriptor limit (ulimit -n) is 200, which leaves room for 0 connections beside the 208 "
        "descriptors the server keeps for itself: raise it to at least 224\n"
    ))
    assert not db.exists()


# -- connections: how many, and how long a request may take to arrive ----------------------------------

HALF_SENT = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"  # no blank line


def answer(status: str, text: str) -> bytes:
    body = (text + "\n").encode()
    retry = "retry-after: 1\r\n" if status.startswith("503") else ""
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
        f"content-length: {len(body)}\r\n{retry}\r\n"
    ).encode() + body


def timed_out(seconds: int) -> bytes:
    return answer("408 Request Timeout", f"The request did not arrive whole within {seconds} s of the connection "
                                         "being ready for it; send each request at once.")


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


def need_descriptors(n: int) -> None:
    """This process (the attacker) must hold `n` sockets: raise its soft limit, or skip."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < n:
        if hard != resource.RLIM_INFINITY and hard < n:
            pytest.skip(f"this test opens {n} sockets; the descriptor limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))


def half_sent(port: int, n: int) -> list[socket.socket]:
    """`n` connections, each with the start of a request and never the rest."""
    out = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        out.append(sock)
        with contextlib.suppress(OSError):  # closed by the server as soon as accepted
            sock.sendall(HALF_SENT)
    return out


def closed_by_server(socks: list[socket.socket], timeout: float) -> list[bytes | None]:
    """What the server sent on each socket before closing it; None for one it still holds after
    `timeout` seconds (each socket is read until it closes, never longer than that)."""
    got: dict[socket.socket, bytearray] = {s: bytearray() for s in socks}
    done: dict[socket.socket, bytes] = {}
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        for s in socks:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        while len(done) < len(socks) and (left := deadline - time.monotonic()) > 0:
            for key, _ in sel.select(min(left, 0.5)):
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    chunk = sock.recv(4096)
                except ConnectionResetError:
                    chunk = b""
                except BlockingIOError:
                    continue
                if chunk:
                    got[sock] += chunk
                else:
                    done[sock] = bytes(got[sock])
                    sel.unregister(sock)
    return [done.get(s) for s in socks]


def still_open(socks: list[socket.socket]) -> int:
    """How many of `socks` the server has neither answered nor closed (checked without waiting)."""
    with selectors.DefaultSelector() as sel:
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
        return len(socks) - len(sel.select(0))


def test_a_client_is_served_while_a_thousand_half_sent_requests_are_held(tmp_path: Path, tokens_file: Path) -> None:
    need_descriptors(1400)
    db = tmp_path / "m.db"

    async def session(url: str) -> list[str]:
        async with http_session(url, ALICE) as alice:
            created = await alice.call_tool("memory_create", {"path": "/memories/a.md", "file_text": "held\n"})
            viewed = await alice.call_tool("memory_view", {"path": "/memories/a.md"})
        return [text_of(created), text_of(viewed)]

    with http_server("--db", str(db), "--agent", OWNER, "--tokens", str(tokens_file), "--read-timeout", "8") as (
        url, proc, stderr,
    ):
        port = port_of(url)
        held, more = half_sent(port, 1000), []
        try:
            assert still_open(held) == 1000  # the default limit: 1000 connections, all still held
            start = time.monotonic()
            response = post(url, ALICE)
            served = time.monotonic() - start
            results = run_async(session, url)
            # Each of the client's connections made room by closing one held connection, no more.
            held_meanwhile = still_open(held)
            # 100 more: each closes the connection that has waited longest.
            more = half_sent(port, 100)
            outcomes = closed_by_server(held + more, timeout=8 + TIMEOUT)
        finally:
            for s in held + more:
                s.close()
        after = post(url, ALICE)
    assert response.status_code == 200 and served < 2, served
    assert results == [
        "File created successfully at: /memories/a.md",
        "Here's the content of /memories/a.md with line numbers:\n     1\theld\n     2\t",
    ]
    assert after.status_code == 200
    assert 990 <= held_meanwhile < 1000
    busy = answer("503 Service Unavailable", "The server has 1000 connections open, its limit; try again.")
    assert None not in outcomes  # every one was closed, by the limit or by the timeout
    assert set(outcomes) <= {busy, timed_out(8)}
    shed = [i for i, o in enumerate(outcomes) if o == busy]
    # The ones that waited longest went first, and no more than made room for the newcomers.
    assert shed == list(range(len(shed)))
    assert 100 <= len(shed) <= 110
    assert proc.returncode == 0
    assert "mnemo mcp: WARNING: 1000 connections open, the limit (--max-connections): each new one now closes the " \
           "one that has waited longest for its request (counts follow at most once a minute)\n" in stderr.text


def test_half_sent_requests_never_exhaust_the_descriptors(db: str, tokens_file: Path) -> None:
    need_descriptors(1400)
    with http_server("--db", str(db), "--agent", OWNER, "--tokens", str(tokens_file), "--read-timeout", "6",
                     nofile=1024) as (url, proc, stderr):
        stderr.wait_for(r"^mnemo mcp: warning: the descriptor limit \(ulimit -n 1024\) leaves room for 808 "
                        r"connections, fewer than the 1000 asked for$")
        held = half_sent(port_of(url), 1100)  # more than the server has descriptors
        try:
            start = time.monotonic()
            response = post(url, ALICE)
            served = time.monotonic() - start
            held_meanwhile = still_open(held)
            outcomes = closed_by_server(held, timeout=6 + TIMEOUT)
        finally:
            for s in held:
                s.close()
        after = post(url, BOB)
    assert response.status_code == 200 and served < 2, served
    assert after.status_code == 200
    assert 800 <= held_meanwhile <= 808  # served while the server held all it may
    busy = answer("503 Service Unavailable", "The server has 808 connections open, its limit; try again.")
    # Closed by the limit (or as soon as accepted: nothing sent), else after the timeout; none left.
    assert None not in outcomes and set(outcomes) <= {busy, b"", timed_out(6)}
    assert 800 <= outcomes.count(timed_out(6)) <= 808
    assert "Too many open files" not in stderr.text and "out of system resource" not in stderr.text
    assert proc.returncode == 0


def test_a_request_must_arrive_whole_within_the_read_timeout(tmp_path: Path, tokens_file: Path) -> None:
    async def slow_session(url: str) -> str:
        async with http_session(url, ALICE) as alice:  # its event stream is open meanwhile
            await anyio.sleep(2.5)  # idle past the timeout
            return text_of(await alice.call_tool("memory_view", {"path": "/memories"}))

    with http_server("--db", str(tmp_path / "m.db"), "--tokens", str(tokens_file), "--read-timeout", "1") as (
        url, _, _,
    ):
        port = port_of(url)
        idle = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        trickle = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        start = time.monotonic()
        trickled = b""
        for byte in HALF_SENT:  # a byte every 0.1 s does not extend the deadline
            if still_open([trickle]) == 0:  # answered: stop before a byte meets the closed socket
                break
            trickle.sendall(bytes([byte]))
            trickled += bytes([byte])
            time.sleep(0.1)
        waited = time.monotonic() - start
        # A second request on a kept-alive connection that never ends.
        kept = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        kept.sendall(b"GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = kept.recv(4096)
        kept.sendall(HALF_SENT)
        outcomes = closed_by_server([idle, trickle, kept], timeout=TIMEOUT)
        for s in (idle, trickle, kept):
            s.close()
        viewed = run_async(slow_session, url)
    assert 1 <= waited < 1 + 3 and len(trickled) < len(HALF_SENT)
    assert outcomes[:2] == [b"", timed_out(1)]
    assert first.startswith(b"HTTP/1.1 404 Not Found\r\n")
    kept_out = outcomes[2]
    assert kept_out is not None and kept_out.endswith(timed_out(1))
    assert viewed.startswith("Here're the files and directories up to 2 levels deep in /memories")


def test_a_connection_with_a_request_in_progress_is_never_closed_to_make_room(
    tmp_path: Path, tokens_file: Path
) -> None:
    with http_server("--db", str(tmp_path / "m.db"), "--tokens", str(tokens_file), "--max-connections", "1") as (
        url, _, stderr,
    ), httpx2.Client(timeout=TIMEOUT) as client:
        auth = {**HEADERS, "Authorization": f"Bearer {ALICE}"}
        session = client.post(url, json=INITIALIZE, headers=auth).headers["mcp-session-id"]
        events = {"Accept": "text/event-stream", "Authorization": f"Bearer {ALICE}", "Mcp-Session-Id": session}
        with client.stream("GET", url, headers=events) as stream:  # the session's event stream: in progress
            assert stream.status_code == 200
            newcomer = half_sent(port_of(url), 1)
            (outcome,) = closed_by_server(newcomer, timeout=TIMEOUT)
            newcomer[0].close()
            stream_open = not stream.is_closed
        after = post(url, ALICE)  # the stream ended: room again
    assert outcome == b""  # the newcomer was closed at once (it had sent nothing yet when it was seen)
    assert stream_open and after.status_code == 200
    warning = "mnemo mcp: WARNING: 1 connection open, the limit (--max-connections): each new one now closes"
    assert warning in stderr.text


def test_the_guard_closes_the_connection_that_waited_longest_and_counts_what_it_closed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from mnemo.tools.mcp import connections

    now = [100.0]
    monkeypatch.setattr(connections.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(connections, "SLACK", 1)
    guard = connections.ConnectionGuard(2, 1.5)
    closed: list[tuple[str, int]] = []

    class Conn:
        def __init__(self, name: str, waiting: bool) -> None:
            self.name = name
            if waiting:
                guard.reading[self] = None

        def close_waiting(self, status: int, reason: str, text: str) -> None:
            assert (reason, text) == (
                "Service Unavailable", "The server has 2 connections open, its limit; try again."
            )
            closed.append((self.name, status))
            guard.open.discard(self)
            guard.reading.pop(self, None)

    for name, waiting in [("a", True), ("busy", False), ("b", True), ("c", True), ("busy2", False)]:
        guard.admit(Conn(name, waiting))
    assert closed == [("a", 503), ("b", 503), ("c", 503)]  # the longest waiting first; busy ones stay
    guard.admit(Conn("d", True))  # every other one is busy: the newcomer itself goes
    assert closed[-1] == ("d", 503)
    now[0] += 30
    guard.admit(Conn("e", False))  # said once a minute at most
    now[0] += 31
    guard.admit(Conn("f", False))
    assert closed[-2:] == [("e", 503), ("f", 503)]
    assert [r.getMessage() for r in caplog.records] == [
        "2 connections open, the limit (--max-connections): each new one now closes the one that has waited "
        "longest for its request (counts follow at most once a minute)",
        "in the last 61 s, 5 connections were closed at the limit and 0 as soon as accepted "
        "(2 connections open, the limit (--max-connections))",
    ]
    # Accepted sockets: at most max_connections + SLACK hold a descriptor at once.
    socks = [socket.socket() for _ in range(4)]
    try:
        assert [guard.hold(s) for s in socks] == [True, True, True, False]
        socks[0].close()
        assert guard.hold(socks[3]) and guard.refused == 1
    finally:
        for s in socks:
            s.close()
    for bad, message in [
        ((0, 1.0), "max_connections must be a positive integer, got 0"),
        ((True, 1.0), "max_connections must be a positive integer, got True"),
        ((1, 0), "read_timeout must be a positive number of seconds, got 0"),
        ((1, float("inf")), "read_timeout must be a positive number of seconds, got inf"),
        ((1, "5"), "read_timeout must be a positive number of seconds, got '5'"),
    ]:
        with pytest.raises(InvalidInput) as exc:
            connections.ConnectionGuard(*bad)  # type: ignore[arg-type]
        assert str(exc.value) == message
