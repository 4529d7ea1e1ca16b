"""The errors of the transparency library, each carrying the exit code its command returns
(docs/TRANSPARENCY.md §6): 1 for a defect inside a readable input, 2 for a usage error or an input
that cannot be read at all. The base class, UsageError and StaleCache are defined in mnemo.errors,
below the file backend, whose leaf-hash cache raises them; they are re-exported here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import StaleCache, TransparencyError, UsageError


@dataclass(frozen=True)
class Finding:
    """One thing wrong with a note, a proof or a log: `kind` names the check, `message` says what."""

    kind: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message}

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


class UnreadableInput(TransparencyError):
    """A file or key that cannot be read at all: missing, unreadable, not UTF-8, not a bundle, not
    JSON, not a key."""

    exit_code = 2


class DamagedLog(TransparencyError):
    """The log cannot be read as a whole chain (bad header or frame, seqs not contiguous, genesis not
    first, a prev that is not the hash of the entry before): nothing was signed or proved."""

    exit_code = 1

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


class Rejected(TransparencyError):
    """A readable input failed its checks: a checkpoint whose root is not the log's, a witness
    asked to cosign a checkpoint it cannot verify. `problems` lists every finding."""

    exit_code = 1

    def __init__(self, message: str, problems: tuple[Finding, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems


__all__ = ["DamagedLog", "Finding", "Rejected", "StaleCache", "TransparencyError", "UnreadableInput", "UsageError"]
