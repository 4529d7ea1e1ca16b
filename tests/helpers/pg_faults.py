"""Faults the PostgreSQL tests inject into a store's connections: a backend ended by the server, an
append cut off with its call in flight, new connections that cannot ask anything, and a spy on the
flushes a store makes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from .pg import Schema, with_database


def terminate(store: Any, pid: int) -> None:
    """What a server restart does to one connection: its backend is ended from another connection
    (the call returns once it has ended, 5 s at most)."""
    # from the server's maintenance database: the store's own may be refusing connections by then
    with psycopg.connect(with_database(store._dsn, "postgres"), autocommit=True) as killer:
        killer.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])


def kill_at_append(monkeypatch: pytest.MonkeyPatch, store: Any, land: bool,
                   meanwhile: Callable[[], object] = lambda: None) -> dict[str, bool]:
    """The next blind append's connection (its call of mnemo_put) is killed: before the call reaches
    the server, or after it ran, before its answer came back; `meanwhile` runs just before the kill
    (another writer's commit, a database that stops taking connections). The state returned says
    whether it was."""
    conn = store._writer()
    real = conn.execute
    state = {"done": False}

    def execute(query: Any, params: Any = None, **kw: Any) -> Any:
        if state["done"] or "mnemo_put" not in str(query):
            return real(query, params, **kw)
        state["done"] = True
        pid = conn.info.backend_pid
        if land:
            real(query, params, **kw)
        meanwhile()
        terminate(store, pid)
        return real("SELECT 1")  # raises: the server closed the connection

    monkeypatch.setattr(conn, "execute", execute)
    return state


def cannot_ask(monkeypatch: pytest.MonkeyPatch, store: Any, when: Callable[[], bool] = lambda: True) -> None:
    """The connections the store opens from now on (once `when()` holds) are lost as they take the
    head row, the first step of asking whether a cut-off commit landed."""
    real_connect = store._connect

    def connect(*args: Any, **kw: Any) -> Any:
        conn = real_connect(*args, **kw)
        if when():
            execute = conn.execute

            def asking(query: Any, params: Any = None, **kw2: Any) -> Any:
                if "mnemo_head" in str(query):
                    raise psycopg.OperationalError("server closed the connection unexpectedly")
                return execute(query, params, **kw2)

            conn.execute = asking
        return conn

    monkeypatch.setattr(store, "_connect", connect)


def spy_flushes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The tickets of the flushes PostgreSQL stores make from now on (a _flush that found its commit
    already durable, and so made none, is not one)."""
    from mnemo.storage.postgres.store import PostgresStore

    made: list[int] = []
    real = PostgresStore._flush

    def spy(self: PostgresStore, ticket: int) -> None:
        before = self._flushed
        real(self, ticket)
        if self._flushed > before:
            made.append(ticket)

    monkeypatch.setattr(PostgresStore, "_flush", spy)
    return made


def damage_payload(pg: Schema, path: str, seq: int) -> str:
    """A byte of seq's payload zeroed past the triggers (as a superuser who disables them can), in its
    row and in its record's copy when it is a latest version (schema version 12); returns the refusal
    every read that serves it gives, `path` being the store's."""
    with pg.connect() as conn:
        conn.execute("SET session_replication_role = replica")  # no trigger stops this session
        for table in ("mnemo_payloads", "mnemo_records"):
            conn.execute(f"UPDATE {table} SET payload = overlay(payload PLACING '\\x00'::bytea FROM 20) "
                         "WHERE seq = %s", [seq])
    return f"{path}: the payload of seq {seq} is not served: it does not match the digest its chain entry commits to"
