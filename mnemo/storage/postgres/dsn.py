"""The DSNs of the PostgreSQL backend: reading one (its errors never quoting it), the session settings
every connection of a store starts with, the name messages show for it (without its password), and
roles: another role's DSN, and what an application role is granted."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import Conninfo

from ...errors import StorageError
from ..types import is_dsn, shown_name
from . import schema
from .errors import first_line, storage_error

UNREADABLE_DSN = "postgresql://(an unreadable DSN)"


def display_name(dsn: str) -> str:
    """The DSN without its password, for messages and stats: as the CLI names it (shown_name), a
    key=value DSN as the URI it stands for; a DSN libpq cannot read, by no piece of it."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return UNREADABLE_DSN
    return shown_name(dsn if is_dsn(dsn) else _as_uri(params))


def _as_uri(params: dict[str, Any]) -> str:
    """The URI of a key=value DSN's parameters: the user, hosts, ports and database in their places, every
    other parameter (the password among them, for shown_name to leave out) in its query. Each piece is
    percent-encoded, but for a host's `/`, `,`, `:` and brackets (socket directories, host lists, IPv6),
    so that none can pass for another piece."""
    host = quote(str(params.get("host", "")), safe="/,:[]")
    port = quote(str(params.get("port", "")), safe=",")
    user = quote(str(params.get("user", "")), safe="")
    where = f"{user}@" if user else ""
    where += f"{host}:{port}" if port else host
    query = "&".join(f"{quote(str(key), safe='')}={quote(str(value), safe='')}" for key, value in params.items()
                     if key not in ("host", "port", "user", "dbname"))
    return f"postgresql://{where}/{quote(str(params.get('dbname', '')), safe='')}" + (f"?{query}" if query else "")


def session_conninfo(dsn: str) -> str:
    """`dsn` with the session settings every connection of a store starts with, added to the options
    it may hold already (a search_path): no JIT compilation, which costs tens of milliseconds on
    queries whose plans take a fraction of one (the planner's costs of them, on guessed row counts of
    tables it has no statistics of, can pass jit_above_cost), and no parallel workers, whose start
    costs milliseconds on the same guesses (a recall's lookup of a term of a few postings, the planner
    keeping no statistics of terms, is guessed at thousands of rows and given workers)."""
    params = dsn_params(dsn)
    params["options"] = (str(params.get("options", "")) + " -c jit=off -c max_parallel_workers_per_gather=0").strip()
    return make_conninfo("", **params)


def dsn_params(dsn: str) -> dict[str, Any]:
    """The parameters of `dsn`; a StorageError that does not quote it when libpq cannot read it (every
    connection is made from a DSN read here first, so that libpq's own refusal is never shown)."""
    try:
        return conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise unreadable_dsn(dsn, exc) from None


def unreadable_dsn(dsn: str, exc: psycopg.ProgrammingError) -> StorageError:
    """libpq's reason for refusing a DSN, without the pieces of the DSN it quotes: one can be the
    password (`password=x secret` is refused with 'missing "=" after "secret"', a URI with an unclosed
    bracket is quoted whole). Connection keywords and single characters are kept; when the DSN holds
    a double quote of its own, where a quoted piece ends cannot be told, and the reason ends before its
    first quote."""
    reason = first_line(exc)
    if '"' in dsn:
        before, quote, _rest = reason.partition('"')
        reason = before.rstrip(" :") + " … (left out: it quotes the DSN, which holds a quote)" if quote else reason
    else:
        keywords = {option.keyword.decode() for option in Conninfo.get_defaults()}
        reason = re.sub(r'"([^"]*)"', lambda m: m[0] if len(m[1]) <= 1 or m[1] in keywords else '"…"', reason)
    return StorageError(f"PostgreSQL at {UNREADABLE_DSN} failed: {reason}")


def grant_application_role(dsn: str, role: str) -> None:
    """Give `role` exactly what an application needs of the Mnemo database in the first schema of
    `dsn`'s search_path (schema.APPLICATION_PRIVILEGES): append entries, erase payloads (in a forget's
    transaction only), keep the derived tables. Run it as the tables' owner. The role can then neither
    update nor delete an entry, nor disable a trigger or alter a table; compaction (VACUUM FULL) and
    schema migrations stay the owner's."""
    name = display_name(dsn)
    dsn_params(dsn)
    try:
        with psycopg.connect(dsn, autocommit=False, connect_timeout=10) as conn:
            row = conn.execute("SELECT current_schema()").fetchone()
            if row is None or row[0] is None:
                raise StorageError(f"{name}: the first schema of the search_path does not exist")
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(row[0]), sql.Identifier(role)))
            for table, privileges in schema.APPLICATION_PRIVILEGES.items():
                conn.execute(sql.SQL("GRANT {} ON {} TO {}").format(
                    sql.SQL(privileges), sql.Identifier(table), sql.Identifier(role)))
            conn.commit()
    except psycopg.Error as exc:
        raise storage_error(exc, name) from None


def application_dsn(dsn: str, user: str, password: str | None = None) -> str:
    """The DSN of `dsn` for another role (tests, and docs/POSTGRES.md's role layout)."""
    params = conninfo_to_dict(dsn)
    params["user"] = user
    if password is None:
        params.pop("password", None)
    else:
        params["password"] = password
    return make_conninfo("", **params)


__all__ = [
    "UNREADABLE_DSN", "application_dsn", "display_name", "dsn_params", "grant_application_role", "session_conninfo",
    "unreadable_dsn",
]
