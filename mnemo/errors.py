"""The errors Mnemo raises. Every refusal is a MnemoError, so callers can catch one class."""

from __future__ import annotations


class MnemoError(Exception):
    """Base class of every error Mnemo raises on purpose."""


class NotFound(MnemoError, KeyError):
    """No live record has that id (never written, or forgotten)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "not found"


class PermissionDenied(MnemoError):
    """The calling agent lacks the permission the operation needs."""


class Conflict(MnemoError):
    """An update's expected_version did not match the record's current version."""


class IntegrityError(MnemoError):
    """The database is damaged or was tampered with. `offset` names the first bad byte when known."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


class LockTimeout(MnemoError):
    """The writer lock could not be taken within lock_timeout seconds."""


class ReadOnly(MnemoError):
    """A write was attempted on a client opened with readonly=True."""


class Closed(MnemoError):
    """The client was closed."""


class InvalidInput(MnemoError, ValueError):
    """An argument has the wrong type or is over a limit. Nothing was written."""


class EmbedderError(MnemoError):
    """The embedder given to the client failed, or answered with something that is not one finite
    float32 vector of its dimension per text. Nothing was written."""


class EmbedderMismatch(MnemoError):
    """The database's vectors were made by another embedder (another name or dimension) than the one
    the client was opened with. Open it with that embedder, or rebuild the vectors with `mnemo reindex`."""


class DurabilityError(MnemoError):
    """An fsync or write failed; the client refuses further writes rather than retry."""


class ErasureIncomplete(MnemoError):
    """A forget was committed and its content erased from the database's files, but this process still
    holds a descriptor of a log that a compaction replaced (a read through it did not finish in time),
    through which the erased bytes can still be read until that read ends. The message names it."""


class UnreadableDatabase(MnemoError):
    """The database file cannot be opened or read at all (missing, a directory, no permission, I/O error).

    Damage inside a readable file is never this: it is a Problem in the VerifyReport."""


# The transparency library's errors (mnemo.transparency re-exports them) start here, below the file
# backend, whose leaf-hash cache and its proofs raise StaleCache and UsageError.
class TransparencyError(MnemoError):
    """Base class; `exit_code` is what the command line returns for it."""

    exit_code = 1


class UsageError(TransparencyError, InvalidInput):
    """Arguments that make no sense together or are out of range (a tree of size 0, a seq past the
    tree, both or neither of a key and a checkpoint). Nothing was read or signed."""

    exit_code = 2


class StaleCache(TransparencyError):
    """A leaf-hash cache that is not the log's: another database's, damaged, behind, or disagreeing
    with the tree head computed from the log. Rebuild it from the log; never use it."""

    exit_code = 1


class StorageError(MnemoError):
    """The storage backend failed: the PostgreSQL server is unreachable, refused a statement, or holds a
    schema this version cannot use. The message says which; nothing was written unless it says so."""


__all__ = [
    "Closed",
    "Conflict",
    "DurabilityError",
    "EmbedderError",
    "EmbedderMismatch",
    "ErasureIncomplete",
    "IntegrityError",
    "InvalidInput",
    "LockTimeout",
    "MnemoError",
    "NotFound",
    "PermissionDenied",
    "ReadOnly",
    "StaleCache",
    "StorageError",
    "TransparencyError",
    "UnreadableDatabase",
    "UsageError",
]
