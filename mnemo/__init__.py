"""Mnemo: an embedded, append-only, hash-chained memory store for AI agents."""

from .client import MnemoClient, RecordUnavailable
from .errors import (
    Closed,
    Conflict,
    DurabilityError,
    IntegrityError,
    InvalidInput,
    LockTimeout,
    MnemoError,
    NotFound,
    PermissionDenied,
    ReadOnly,
    StorageError,
)
from .record import MemoryRecord, Problem, RecordInfo, VerifyReport
from .validation import Limits

__version__ = "0.1.0"

__all__ = [
    "Closed",
    "Conflict",
    "DurabilityError",
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
    "RecordInfo",
    "RecordUnavailable",
    "StorageError",
    "VerifyReport",
]


def __getattr__(name: str) -> object:
    # The memory-tool server lives in mnemo.tools; imported on first use so `import mnemo` stays light.
    if name == "MnemoMemoryToolServer":
        from .tools.server import MnemoMemoryToolServer

        return MnemoMemoryToolServer
    raise AttributeError(f"module 'mnemo' has no attribute {name!r}")
