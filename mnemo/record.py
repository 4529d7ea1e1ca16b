"""Small immutable value types returned by the public API."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any


def ns_to_datetime(ts_ns: int) -> datetime:
    """Wall-clock nanoseconds to an aware UTC datetime (microsecond precision)."""
    return datetime.fromtimestamp(ts_ns // 1000 / 1_000_000, tz=timezone.utc)


@dataclass(frozen=True)
class MemoryRecord:
    """One version of one memory, as stored."""

    id: str
    version: int
    content: str | bytes
    tags: tuple[str, ...]
    metadata: dict[str, Any]
    scope: str
    agent_id: str
    created_at: datetime
    updated_at: datetime
    seq: int
    hash: str


@dataclass(frozen=True)
class RecordInfo:
    """What the index knows about a record's latest version, without reading its content from disk."""

    id: str
    version: int
    scope: str
    tags: tuple[str, ...]
    size: int
    agent_id: str
    created_at: datetime
    updated_at: datetime
    seq: int


@dataclass(frozen=True)
class Problem:
    """One finding of a verification: what is wrong, and where."""

    kind: str
    message: str
    seq: int | None = None
    offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "seq": self.seq, "offset": self.offset}


@dataclass(frozen=True)
class VerifyReport:
    """The result of verifying a database or an export: every problem found, not only the first."""

    ok: bool
    entries: int
    head_seq: int
    head_hash: str
    problems: tuple[Problem, ...] = ()
    erased: int = 0
    checkpoints: int = 0
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "entries": self.entries,
            "head_seq": self.head_seq,
            "head_hash": self.head_hash,
            "erased": self.erased,
            "checkpoints": self.checkpoints,
            "problems": [p.to_json() for p in self.problems],
            "notes": list(self.notes),
        }
