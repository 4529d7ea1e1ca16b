"""PostgreSQL for the tests: a database of their own on the server `MNEMO_TEST_POSTGRES` names (created
for the run, dropped after it), and in it a fresh schema per test, so that every test starts from an
empty Mnemo database. Without the variable, or without a reachable server, the tests that need it skip
with the reason, unless `MNEMO_REQUIRE_POSTGRES=1` (set by .ci/run) makes that a failure."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    import psycopg

    from mnemo import MnemoClient

ENV = "MNEMO_TEST_POSTGRES"
REQUIRE = "MNEMO_REQUIRE_POSTGRES"


def server_dsn() -> str | None:
    return os.environ.get(ENV) or None


def with_database(dsn: str, dbname: str) -> str:
    import psycopg.conninfo

    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return psycopg.conninfo.make_conninfo("", **params)


def uri(dsn: str, schema: str | None = None) -> str:
    """A postgresql:// URI for MnemoClient (which selects the backend by the URI's scheme)."""
    import psycopg.conninfo

    params = psycopg.conninfo.conninfo_to_dict(dsn)
    user = params.pop("user", "")
    password = params.pop("password", None)
    host = params.pop("host", "")
    port = params.pop("port", "")
    dbname = params.pop("dbname", "")
    auth = quote(str(user)) + (f":{quote(str(password))}" if password else "")
    netloc = (auth + "@" if auth else "") + (str(host) if "/" not in str(host) else "") + (f":{port}" if port else "")
    query = [f"{k}={quote(str(v))}" for k, v in params.items()]
    if "/" in str(host):  # a socket directory
        query.append(f"host={quote(str(host))}")
    if schema is not None:
        query.append("options=" + quote(f"-csearch_path={schema}"))
    return f"postgresql://{netloc}/{dbname}" + ("?" + "&".join(query) if query else "")


class PgDatabase:
    """The run's own database on the server: created once, dropped at the end. Schemas are made and
    dropped on one connection kept for the run."""

    def __init__(self, server: str) -> None:
        import psycopg

        self.server = server
        self.name = f"mnemo_test_{os.getpid()}_{secrets.token_hex(3)}"
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        self.dsn = with_database(server, self.name)
        self._admin: Any = None

    def _sql(self, statement: str) -> None:
        import psycopg

        for attempt in (0, 1):  # a test may have terminated every connection to the database
            if self._admin is None or self._admin.closed or self._admin.broken:
                # never waits for ever: a drop blocked by a connection a test left open fails (drop_schemas)
                self._admin = psycopg.connect(self.dsn, autocommit=True, options="-clock_timeout=30s")
            try:
                self._admin.execute(statement)
                return
            except psycopg.OperationalError:
                if attempt or not self._admin.broken:
                    raise

    def new_schema(self) -> tuple[str, str]:
        """(schema name, URI whose search_path puts it first) of a fresh, empty schema."""
        name = "t_" + secrets.token_hex(6)
        self._sql(f'CREATE SCHEMA "{name}"')
        return name, uri(self.dsn, name)

    def drop_schema(self, name: str) -> None:
        self.drop_schemas([name])

    def drop_schemas(self, names: list[str]) -> None:
        import psycopg

        for i in range(0, len(names), 8):  # a few at a time: each drop locks every object of its schemas
            some = names[i : i + 8]
            drop = "DROP SCHEMA IF EXISTS " + ", ".join(f'"{n}"' for n in some) + " CASCADE"
            try:
                self._sql(drop)
            except psycopg.errors.LockNotAvailable:
                # A connection left open (by the test, or by a store it never closed) still holds a lock
                # there: end it so that the run goes on, and fail the test that left it.
                holders = self._admin.execute(
                    "SELECT DISTINCT a.pid, a.application_name, a.state, left(a.query, 200) "
                    "FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE n.nspname = ANY(%s) AND a.pid <> pg_backend_pid()", [some],
                ).fetchall()
                for pid, *_ in holders:
                    self._admin.execute("SELECT pg_terminate_backend(%s)", [pid])
                self._sql(drop)
                raise AssertionError(f"connections left open held locks in schema {some}: {holders}") from None

    def drop(self) -> None:
        import psycopg

        if self._admin is not None:
            self._admin.close()
        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


class Schema:
    """A fresh schema of the run's database: its URI for MnemoClient, and SQL on it for the test."""

    def __init__(self, database: PgDatabase) -> None:
        self.database = database
        self.name, self.url = database.new_schema()

    def connect(self, autocommit: bool = True, **kwargs: Any) -> psycopg.Connection[Any]:
        import psycopg

        return psycopg.connect(self.database.dsn, autocommit=autocommit, options=f"-csearch_path={self.name}", **kwargs)

    def routines(self) -> list[tuple[str, str]]:
        """The functions ("f") and procedures ("p") of the schema, by name."""
        return self.sql(
            "SELECT proname::text, prokind::text FROM pg_proc WHERE pronamespace = current_schema()::regnamespace "
            "ORDER BY 1"
        )

    def sql(self, query: str, params: Any = None) -> list[Any]:
        with self.connect() as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []


class AppRole:
    """A login role holding what `grant_application_role` gives (docs/POSTGRES.md's application role) on
    a schema: the URI its agents connect with, and SQL as it, as one holding its credentials could run."""

    def __init__(self, schema: Schema) -> None:
        from mnemo.storage.postgres import application_dsn, grant_application_role

        self.schema = schema
        self.name = f"mnemo_app_{secrets.token_hex(4)}"
        schema.sql(f'CREATE ROLE "{self.name}" LOGIN')
        grant_application_role(schema.url, self.name)
        self.dsn = application_dsn(schema.database.dsn, self.name)
        self.url = uri(self.dsn, schema.name)

    def connect(self) -> psycopg.Connection[Any]:
        import psycopg

        return psycopg.connect(self.dsn, autocommit=True, options=f"-csearch_path={self.schema.name}")

    def sql(self, query: str, params: Any = None) -> list[Any]:
        with self.connect() as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def refused(self, *statements: tuple[str, Any]) -> str:
        """The first line of the error that refuses the statements ((sql, params) each), run as this role
        in one transaction (it fails the test if they are not refused for want of a privilege)."""
        import psycopg
        import pytest

        with self.connect() as conn, pytest.raises(psycopg.errors.InsufficientPrivilege) as refused, \
                conn.transaction():
            for statement, params in statements:
                conn.execute(statement, params)
        return str(refused.value).splitlines()[0]

    def drop(self) -> None:
        self.schema.sql(f'DROP OWNED BY "{self.name}"')
        self.schema.sql(f'DROP ROLE IF EXISTS "{self.name}"')


def sent_statements(c: MnemoClient, read: Callable[[], Any]) -> list[tuple[str, Any]]:
    """The statements (with their parameters) `read` sends on the PostgreSQL store's read connection."""
    conn: Any = c._store._read  # type: ignore[attr-defined]
    execute, sent = conn.execute, []

    def spy(query: Any, params: Any = None, *args: Any, **kwargs: Any) -> Any:
        sent.append((str(query), params))
        return execute(query, params, *args, **kwargs)

    conn.execute = spy
    try:
        read()
    finally:
        del conn.execute
    return sent
