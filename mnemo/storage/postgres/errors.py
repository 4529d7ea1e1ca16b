"""psycopg's errors as the MnemoErrors a caller can act on, each naming the database it was about and
quoting the first line of the server's message only."""

from __future__ import annotations

import psycopg
from psycopg import errors as pg_errors

from ...errors import LockTimeout, MnemoError, StorageError


def storage_error(exc: BaseException, what: str) -> MnemoError:
    """A psycopg error as the MnemoError a caller can act on."""
    if isinstance(exc, MnemoError):
        return exc
    if isinstance(exc, pg_errors.LockNotAvailable):
        return LockTimeout(f"could not take the writer lock on {what} in time: another writer holds it")
    if isinstance(exc, pg_errors.InsufficientPrivilege):
        return StorageError(f"PostgreSQL at {what} refused: {first_line(exc)} (a role with more privileges "
                            "is needed for this, see docs/POSTGRES.md)")
    if isinstance(exc, pg_errors.QueryCanceled):  # an OperationalError, but on a connection still up
        return StorageError(f"PostgreSQL at {what} cancelled the statement: {first_line(exc)} (a "
                            "statement_timeout or an operator's cancel; the connection is still usable)")
    if isinstance(exc, psycopg.OperationalError):
        return StorageError(f"PostgreSQL at {what} is unreachable or the connection was lost: {first_line(exc)}")
    return StorageError(f"PostgreSQL at {what} failed: {first_line(exc)}")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = ["first_line", "storage_error"]
