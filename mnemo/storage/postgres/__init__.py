"""The PostgreSQL backend (psycopg 3, the `postgres` extra): the same chain and the same contract as the
log file, for agents on many machines (docs/POSTGRES.md)."""

from __future__ import annotations

try:
    import psycopg  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    from ..._install import install_hint
    from ...errors import StorageError

    raise StorageError(f"a postgresql:// database needs psycopg 3: {install_hint('postgres')}") from exc

from .store import PostgresStore, application_dsn, display_name, grant_application_role, open_postgres

__all__ = ["PostgresStore", "application_dsn", "display_name", "grant_application_role", "open_postgres"]
