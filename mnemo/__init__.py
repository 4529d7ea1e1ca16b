"""Mnemo: an embedded, append-only, hash-chained memory store for AI agents.

Installed as the distribution `mnemo-chain`; runs on Linux and macOS.
"""

import sys as _sys

if _sys.platform == "win32":  # before anything imports fcntl, for a message that says why
    raise ImportError(
        "Mnemo does not support Windows: its log needs POSIX advisory file locks (flock), which keep "
        "one writer at a time, and positional reads (os.pread), which let readers share the file "
        "without a lock. Use it on Linux or macOS (on Windows, inside WSL)."
    )

from ._version import __version__ as __version__  # noqa: E402
from .client import MnemoClient, RecordUnavailable, reindex  # noqa: E402
from .errors import (  # noqa: E402
    Closed,
    Conflict,
    DurabilityError,
    EmbedderError,
    EmbedderMismatch,
    ErasureIncomplete,
    IntegrityError,
    InvalidInput,
    LockTimeout,
    MnemoError,
    NotFound,
    PermissionDenied,
    ReadOnly,
    StorageError,
)
from .recall.embedding import Embedder  # noqa: E402
from .record import MemoryRecord, Problem, Recalled, RecordInfo, ScopeReport, VerifyReport  # noqa: E402
from .tools.server import MnemoMemoryToolServer  # noqa: E402
from .validation import Limits  # noqa: E402

__all__ = [
    "Closed",
    "Conflict",
    "DurabilityError",
    "Embedder",
    "EmbedderError",
    "EmbedderMismatch",
    "ErasureIncomplete",
    "IntegrityError",
    "InvalidInput",
    "Limits",
    "LockTimeout",
    "MemoryRecord",
    "MnemoClient",
    "MnemoError",
    "MnemoMemoryToolServer",
    "NotFound",
    "PermissionDenied",
    "Problem",
    "ReadOnly",
    "Recalled",
    "RecordInfo",
    "RecordUnavailable",
    "ScopeReport",
    "StorageError",
    "VerifyReport",
    "reindex",
]

