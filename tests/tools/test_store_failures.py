"""Failures of the store itself, as the model sees them: the memory tool and the MCP tools give what the
model can do, never where the database is (its path, its folder, a sidecar's name, a PostgreSQL server's
name, role or password), and the operator's log has the store's own words (docs/MEMORY_TOOL.md §3)."""

from __future__ import annotations

import errno
import logging
import os
import secrets
from pathlib import Path
from typing import Any

import pytest
from helpers.backends import damage_payload

from mnemo import MnemoClient
from mnemo.errors import InvalidInput, NotFound
from mnemo.tools import CommandResult, MnemoMemoryToolServer
from mnemo.tools.mcp.tools import call_tool
from mnemo.tools.server import STORE_FAILURES

MARKER = "HOSTPATH-" + secrets.token_hex(4)
TOLD = {kind.__name__: text for kind, text in STORE_FAILURES}


@pytest.fixture
def marked(tmp_path: Path) -> Path:
    """A database whose path holds MARKER, in a folder whose name holds it too."""
    folder = tmp_path / f"{MARKER}-folder"
    folder.mkdir()
    return folder / f"{MARKER}.mnemo"


def _create(server: MnemoMemoryToolServer, path: str, text: str = "x") -> CommandResult:
    return server.execute({"command": "create", "path": path, "file_text": text})


def _failing(err: int, filename: str | None = None) -> Any:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise OSError(err, os.strerror(err), *(() if filename is None else (filename,)))
    return fail


def _hidden(text: str, *secrets_: str) -> None:
    for secret in (MARKER, *secrets_):
        assert secret not in text


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS])
def test_a_write_that_fails_on_a_full_or_read_only_disk_names_no_path(
    marked: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, err: int
) -> None:
    """A full disk, or a file system gone read-only, under a create: the model is told what happened and
    what it may do, the log has the OS error, and the log file holds what it held."""
    with MnemoClient(str(marked), "agent-1") as client:
        server = MnemoMemoryToolServer(client)
        assert not _create(server, "/memories/kept.md", "kept").is_error
        before = marked.read_bytes()
        monkeypatch.setattr(os, "pwrite", _failing(err))
        with caplog.at_level(logging.WARNING, "mnemo.tools"):
            result = _create(server, "/memories/new.md")
            after_it = server.execute({"command": "view", "path": "/memories/kept.md"})
        assert result == after_it == CommandResult(TOLD["DurabilityError"], True)
        assert f"[Errno {err}] {os.strerror(err)}" in caplog.text
        monkeypatch.undo()
    assert marked.read_bytes() == before
    with MnemoClient(str(marked), "agent-1") as client:
        assert [r.content for r in client.query()] == ["kept"]
        assert client.verify().ok


def test_a_snapshot_that_cannot_be_removed_for_an_erasure_names_no_path(
    marked: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A delete whose erasure cannot remove the snapshot (DB.snap, beside the log: it holds the tags of
    the record forgotten), as in a folder that refuses: the OS error names that file; the model gets the
    write failure's text, and the next writer completes the erasure."""
    with MnemoClient(str(marked), "agent-1") as client:
        assert not _create(MnemoMemoryToolServer(client), "/memories/gone.md", "secret").is_error
    snapshot = f"{marked}.snap"
    assert os.path.exists(snapshot)  # written at the close
    with MnemoClient(str(marked), "agent-1") as client:
        server = MnemoMemoryToolServer(client)
        monkeypatch.setattr(os, "unlink", _failing(errno.EACCES, snapshot))
        with caplog.at_level(logging.WARNING, "mnemo.tools"):
            result = server.execute({"command": "delete", "path": "/memories/gone.md"})
        monkeypatch.undo()
        assert result == CommandResult(TOLD["DurabilityError"], True)
        assert f"Permission denied: '{snapshot}'" in caplog.text
    with MnemoClient(str(marked), "agent-1") as client:
        assert client.recovery == ["completed an interrupted erasure of 1 payload slots"]
        assert client.query() == []
        assert client.verify().ok
        assert b"secret" not in marked.read_bytes()


def test_a_log_that_cannot_be_read_names_no_path_in_memory_verify(
    marked: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with MnemoClient(str(marked), "agent-1") as client:
        server = MnemoMemoryToolServer(client)
        assert not _create(server, "/memories/a.md").is_error
        monkeypatch.setattr(os, "pread", _failing(errno.EIO))
        with caplog.at_level(logging.WARNING, "mnemo.tools"):
            result = call_tool(server, "memory_verify", {})
        assert result == CommandResult(TOLD["UnreadableDatabase"], True)
        assert f"cannot read {marked} at offset 0: Input/output error" in caplog.text


def test_a_damaged_payload_names_no_database(
    db: str, client: MnemoClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A payload damaged on disk (or in its row): view, search, history and the tool's own integrity
    check each say so without naming the database (its path, or its server), on every backend."""
    server = MnemoMemoryToolServer(client)
    assert not _create(server, "/memories/a.md", "some words here").is_error
    (rec,) = client.query()
    damage_payload(db, rec.seq)
    with caplog.at_level(logging.WARNING, "mnemo.tools"):
        results = [server.execute({"command": "view", "path": "/memories/a.md"}),
                   server.search("words"),
                   call_tool(server, "memory_history", {"path": "/memories/a.md"})]
    assert results == [CommandResult(TOLD["IntegrityError"], True)] * 3
    assert client.path in caplog.text
    report = call_tool(server, "memory_verify", {})
    assert report.text.startswith("FAILED: ") and client.path not in report.text


def test_an_error_in_its_words_names_no_database(
    marked: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error that speaks of the command keeps its words, with any mention of the database (as given,
    absolute or resolved, with a sidecar's suffix, or its folder) replaced; a memory path that merely ends
    in the database's name is the model's own, and stays."""
    relative = os.path.relpath(marked)
    with MnemoClient(relative, "agent-1") as client:
        server = MnemoMemoryToolServer(client)
        assert not _create(server, "/memories/a.md").is_error
        words = (f"{relative} and {marked}.snap ('{marked.resolve()}.leaves'), /memories/{marked.name} "
                 f"in {marked.parent}/other")

        def refused(*args: Any, **kwargs: Any) -> Any:
            raise InvalidInput(words)

        monkeypatch.setattr(client, "get", refused)
        assert server.execute({"command": "view", "path": "/memories/a.md"}) == CommandResult(
            f"Error: the memory store and the memory store ('the memory store'), /memories/{marked.name} "
            "in the memory store's folder", True)

        def missing(*args: Any, **kwargs: Any) -> Any:
            raise NotFound(f"no Mnemo database at {marked}")

        monkeypatch.setattr(client, "get", missing)
        assert server.execute({"command": "view", "path": "/memories/a.md"}) == CommandResult(
            "Error: no Mnemo database at the memory store", True)


def test_a_postgresql_server_that_refuses_names_no_server_role_or_password(
    pg: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The application role's connection, made with a password, is cut and the role may no longer log in:
    the next create is told the database refused and nothing was written; neither the server's address,
    the database, the schema, the role nor the password is in what the model gets, and nothing was
    written."""
    from helpers.pg import uri

    from mnemo.storage.postgres import application_dsn, grant_application_role

    MnemoClient(pg.url, "owner").close()
    role, password = f"mnemo_app_{MARKER.lower().replace('-', '_')}", f"pw-{MARKER}"
    pg.sql(f'CREATE ROLE "{role}" LOGIN PASSWORD \'{password}\'')
    try:
        grant_application_role(pg.url, role)
        url = uri(application_dsn(pg.database.dsn, role, password), pg.name)
        with MnemoClient(url, "owner") as client:
            server = MnemoMemoryToolServer(client)
            assert not _create(server, "/memories/kept.md", "kept").is_error
            entries = pg.sql("SELECT count(*) FROM mnemo_entries")
            pg.sql(f'ALTER ROLE "{role}" NOLOGIN')
            pg.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [role])
            with caplog.at_level(logging.WARNING, "mnemo.tools"):
                result = _create(server, "/memories/new.md")
            assert result == CommandResult(TOLD["StorageError"], True)
            assert "not permitted to log in" in caplog.text
            _hidden(result.text, role, password, pg.name, "postgresql", "127.0.0.1", "5432")
        assert pg.sql("SELECT count(*) FROM mnemo_entries") == entries
    finally:
        pg.sql(f'DROP OWNED BY "{role}"')
        pg.sql(f'DROP ROLE IF EXISTS "{role}"')
