"""How messages name a database: a file path as given, a connection URI without its password wherever
the URI holds one (the user part, even with `@` or `:` in the password, or a `password=` parameter)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnemo.storage.contract import is_dsn, shown_name


@pytest.mark.parametrize(("db", "shown"), [
    ("postgresql://u:p@ss@h/d", "postgresql://u@h/d"),
    ("postgresql://u:p:a@ss:w@h:5/d", "postgresql://u@h:5/d"),
    ("postgresql://u:pw@h/d?password=a=b&sslmode=require", "postgresql://u@h/d?sslmode=require"),
    ("postgresql://u@h/d?Password=x", "postgresql://u@h/d"),
    ("postgresql://u@h/d?passwords=kept", "postgresql://u@h/d?passwords=kept"),
    ("postgresql://h/d", "postgresql://h/d"),
    ("postgres://:secret@h/d", "postgres://@h/d"),
    ("postgresql://u@h/d?a=1&password=x&b=2", "postgresql://u@h/d?a=1&b=2"),
], ids=["at-in-password", "colons-and-ats", "password-parameter", "password-parameter-any-case",
        "another-parameter", "no-user", "no-user-name", "password-parameter-between"])
def test_a_uri_is_shown_without_its_password(db: str, shown: str) -> None:
    assert is_dsn(db)
    assert shown_name(db) == shown


@pytest.mark.parametrize("db", ["/tmp/u:p@h.db", "memory.db", "postgresql:/x", "POSTGRESQL://u:p@h/d",
                                "mysql://u:p@h/d"], ids=["path", "name", "one-slash", "upper-case", "mysql"])
def test_anything_else_is_a_path_shown_as_given(db: str) -> None:
    assert not is_dsn(db)
    assert shown_name(db) == db


@pytest.mark.parametrize(("dsn", "shown"), [
    ("postgresql://alice:secret@db.example:5433/mnemo", "postgresql://alice@db.example:5433/mnemo"),
    ("postgresql://db.example/mnemo", "postgresql://db.example/mnemo"),
    ("postgresql://u@h/d?password=x", "postgresql://u@h/d"),
    ("host=h port=5 user=u password=p dbname=d", "postgresql://u@h:5/d"),
    ("host=h user=u dbname=d", "postgresql://u@h/d"),
    ("host=/var/run/postgresql dbname=d", "postgresql:///var/run/postgresql/d"),
    ("not a dsn = =", "postgresql://(an unreadable DSN)"),
], ids=["user-password-port", "no-user-no-port", "password-parameter", "key-values", "key-values-no-port",
        "socket-directory", "unreadable"])
def test_the_postgres_backend_names_a_dsn_without_its_password(dsn: str, shown: str) -> None:
    pytest.importorskip("psycopg")
    from mnemo.storage.postgres.store import display_name

    assert display_name(dsn) == shown



@pytest.mark.parametrize(("dsn", "why"), [
    ("postgresql://u:secret@127.0.0.1:1/d?foo=bar", 'invalid URI query parameter: "…"'),
    ("postgresql://u:secret@[127.0.0.1/d",
     'end of string reached when looking for matching "]" in IPv6 host address in URI: "…"'),
    ("postgresql://u:se%zzcret@h/d", 'invalid percent-encoded token: "…"'),
    ("postgresql://u@h/d?password=secret=x", 'extra key/value separator "=" in URI query parameter: "password"'),
    ("host=h password=x secret", 'missing "=" after "…" in connection info string'),
    ("host=h port=5 prt=6", 'invalid connection option "…"'),
    ("host=h password=x pw", 'missing "=" after "…" in connection info string'),
    ('host=h password=a"secret"b x', "missing … (left out: it quotes the DSN, which holds a quote)"),
    ("host=h password='a\"secret", "unterminated quoted string in connection info string"),
], ids=["unknown-parameter", "unclosed-bracket", "bad-percent-escape", "extra-separator", "word-alone",
        "unknown-option", "two-letters", "quote-in-dsn", "quote-in-dsn-reason-without"])
def test_an_unreadable_dsn_is_refused_by_the_postgres_backend_without_its_password(dsn: str, why: str) -> None:
    """A DSN libpq cannot read is refused with libpq's reason, but not the pieces of the DSN the reason
    quotes, which can be the password; and never taken for no DSN (which connects to the defaults)."""
    pytest.importorskip("psycopg")
    from mnemo.errors import StorageError
    from mnemo.storage.postgres.store import PostgresStore

    with pytest.raises(StorageError) as info:
        PostgresStore(dsn, "owner")
    assert str(info.value) == f"PostgreSQL at postgresql://(an unreadable DSN) failed: {why}"
    assert "secret" not in str(info.value)


@pytest.mark.parametrize("call", ["grant_application_role", "copy_to"])
def test_every_postgres_connection_refuses_an_unreadable_dsn_without_its_password(
    tmp_path: Path, call: str
) -> None:
    """Not only a store's: granting a role and copying a database to PostgreSQL read the DSN the same
    way before they connect."""
    pytest.importorskip("psycopg")
    from mnemo import MnemoClient
    from mnemo.errors import StorageError
    from mnemo.storage.postgres import grant_application_role

    dsn = "postgresql://u:secret@[127.0.0.1/d"
    with pytest.raises(StorageError) as info:
        if call == "grant_application_role":
            grant_application_role(dsn, "app")
        else:
            with MnemoClient(tmp_path / "source.db", "owner") as source:
                source.remember("x")
                source.copy_to(dsn)
    assert str(info.value) == ('PostgreSQL at postgresql://(an unreadable DSN) failed: end of string reached when '
                               'looking for matching "]" in IPv6 host address in URI: "…"')
