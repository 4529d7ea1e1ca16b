"""Small immutable value types returned by the public API."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ._native import readpath

_UTC = timezone.utc
_fromtimestamp = datetime.fromtimestamp


def ns_to_datetime(ts_ns: int) -> datetime:
    """Wall-clock nanoseconds to an aware UTC datetime (microsecond precision)."""
    # tz given positionally: parsing it as a keyword costs about as much as the conversion itself.
    return _fromtimestamp(ts_ns // 1000 / 1_000_000, _UTC)


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


_new = object.__new__
_set = object.__setattr__


def make_memory_record(
    id: str, version: int, content: str | bytes, tags: tuple[str, ...], metadata: dict[str, Any], scope: str,
    agent_id: str, created_at: datetime, updated_at: datetime, seq: int, hash: str,
) -> MemoryRecord:
    """MemoryRecord(...) for reads that build many: the same frozen object, its fields set in one step
    rather than by the eleven object.__setattr__ calls of the dataclass's __init__ (about half the cost)."""
    record: MemoryRecord = _new(MemoryRecord)
    _set(record, "__dict__", {
        "id": id, "version": version, "content": content, "tags": tags, "metadata": metadata, "scope": scope,
        "agent_id": agent_id, "created_at": created_at, "updated_at": updated_at, "seq": seq, "hash": hash,
    })
    return record


def written_record(
    id: str, version: int, content: str | bytes, tags: tuple[str, ...], metadata: dict[str, Any], scope: str,
    agent_id: str, created_ns: int, ts_ns: int, seq: int, entry_hash: bytes,
) -> MemoryRecord:
    """The record a write returns: version `version` written at `ts_ns` (version 1 was created then,
    a later one at `created_ns`) by the entry `seq` hashing to `entry_hash`. In one call of the C
    extension where it is loaded (mnemo/_readpath.c's made_record), else by written_record_twin."""
    if readpath is not None:
        try:
            record: MemoryRecord = readpath.made_record(MemoryRecord, id, version, content, tags, metadata, scope,
                                                        agent_id, created_ns, ts_ns, seq, entry_hash)
            return record
        except (OverflowError, ValueError):  # a time fromtimestamp refuses: the twin raises what it raises
            pass
    return written_record_twin(id, version, content, tags, metadata, scope, agent_id, created_ns, ts_ns, seq,
                               entry_hash)


def written_record_twin(
    id: str, version: int, content: str | bytes, tags: tuple[str, ...], metadata: dict[str, Any], scope: str,
    agent_id: str, created_ns: int, ts_ns: int, seq: int, entry_hash: bytes,
) -> MemoryRecord:
    """written_record in Python."""
    updated = ns_to_datetime(ts_ns)
    created = updated if version == 1 else ns_to_datetime(created_ns)
    return make_memory_record(id, version, content, tags, metadata, scope, agent_id, created, updated, seq,
                              entry_hash.hex())


@dataclass(frozen=True)
class Recalled:
    """A record recall found: the record (its latest version, as `get` returns it), its score, the best
    few lines of its content that match the query's words, as (line number from 1, line cut to 200
    characters), in line order, and what each ranking gave it (docs/RECALL.md): `lexical`, its BM25
    score (0.0 when it holds none of the words; None in semantic mode), and `semantic`, the cosine of
    its vector with the query's (None in lexical mode). In lexical mode `score` is the BM25 score, in
    semantic mode the cosine, in hybrid mode their fusion."""

    record: MemoryRecord
    score: float
    lines: tuple[tuple[int, str], ...]
    lexical: float | None = None
    semantic: float | None = None


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


@dataclass(frozen=True)
class ScopeReport:
    """What `MnemoClient.verify_scopes` found: the chain checked whole, reported only for the records
    an agent may read in some scopes. `problems` are those at their versions; `elsewhere` says that the
    chain has problems beyond them, which are not described (that needs admin on `*`)."""

    ok: bool
    scopes: tuple[str, ...]
    records: int  # the live records of those scopes
    versions: int  # their versions, every one checked
    problems: tuple[Problem, ...] = ()
    elsewhere: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "scopes": list(self.scopes),
            "records": self.records,
            "versions": self.versions,
            "problems": [p.to_json() for p in self.problems],
            "elsewhere": self.elsewhere,
        }
