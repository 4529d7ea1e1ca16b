"""The HTTP server's clients, one per agent: at most `max_open` open whatever the number of agents served,
the one served longest ago closed first, never one a call is using, and each agent served as before."""

from __future__ import annotations

import threading

import pytest

from mnemo.errors import Closed, InvalidInput
from mnemo.tools.server import CommandResult

pytest.importorskip("mcp")

from mnemo.tools.mcp.app import AgentServers, _run_call  # noqa: E402 - after the extra's check


def _create(pool: AgentServers, agent: str, path: str, text: str) -> None:
    result = _run_call(pool, agent, "memory_create", {"path": path, "file_text": text})
    assert result == CommandResult(f"File created successfully at: {path}", False)


def test_many_agents_keep_at_most_max_open_clients_open_and_each_agent_its_own_memory(db: str) -> None:
    pool = AgentServers(db, max_open=3)
    try:
        first = pool.get("a0")
        for i in range(40):
            _create(pool, f"a{i}", f"/memories/{i}.md", f"note of a{i}")
            assert len(pool.open_agents) == min(i + 1, 3)
        assert pool.open_agents == ["a37", "a38", "a39"]
        assert first.client.closed  # closed to make room, not kept
        # a closed agent is opened again on its next call, and answers as before: its files only
        assert _run_call(pool, "a0", "memory_view", {"path": "/memories"}).text.split("\n")[1:] == [
            "10B\t/memories", "10B\t/memories/0.md",
        ]
        assert _run_call(pool, "a0", "memory_view", {"path": "/memories/0.md"}).text == (
            "Here's the content of /memories/0.md with line numbers:\n     1\tnote of a0"
        )
        assert _run_call(pool, "a0", "memory_view", {"path": "/memories/1.md"}) == CommandResult(
            "The path /memories/1.md does not exist. Please provide a valid path.", True
        )
        assert pool.open_agents == ["a38", "a39", "a0"]
        # a call to an open agent makes it the last to be closed
        _run_call(pool, "a38", "memory_view", {"path": "/memories"})
        _create(pool, "b", "/memories/b.md", "b")
        assert pool.open_agents == ["a0", "a38", "b"]
    finally:
        pool.close()
    assert pool.open_agents == []
    with pytest.raises(Closed):
        pool.get("a0")


def test_a_client_in_use_is_never_closed_to_make_room(db: str) -> None:
    pool = AgentServers(db, max_open=1)
    try:
        results: list[CommandResult] = []
        with pool.serving("a") as held:
            other = threading.Thread(target=lambda: results.append(
                _run_call(pool, "b", "memory_create", {"path": "/memories/b.md", "file_text": "b"})))
            other.start()
            other.join(0.5)
            assert other.is_alive() and results == []  # b waits: a's client is the one open, and in use
            assert not held.client.closed and pool.open_agents == ["a"]
            assert held.execute({"command": "create", "path": "/memories/a.md", "file_text": "a"}).text == (
                "File created successfully at: /memories/a.md"
            )
        other.join()
        assert results == [CommandResult("File created successfully at: /memories/b.md", False)]
        assert held.client.closed and pool.open_agents == ["b"]
        assert _run_call(pool, "a", "memory_view", {"path": "/memories/a.md"}).text == (
            "Here's the content of /memories/a.md with line numbers:\n     1\ta"
        )
    finally:
        pool.close()


def test_a_client_that_cannot_open_takes_no_place(tmp_path: object) -> None:
    pool = AgentServers(str(tmp_path), max_open=1)  # a directory: no client opens on it
    try:
        for _ in range(3):
            assert _run_call(pool, "a", "memory_view", {"path": "/memories"}) == CommandResult(
                "Error: The memory store cannot be opened; the server's log says why", True
            )
        assert pool.open_agents == []
    finally:
        pool.close()


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, None])
def test_max_open_must_be_a_positive_int(db: str, bad: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        AgentServers(db, max_open=bad)  # type: ignore[arg-type]
    assert str(refused.value) == f"max_open must be a positive int, got {bad!r}"
