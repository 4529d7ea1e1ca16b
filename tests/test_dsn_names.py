"""How messages name a database: a file path as given, a connection URI without its password wherever
the URI holds one (the user part, even with `@` or `:` in the password, or a `password=` parameter)."""

from __future__ import annotations

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
