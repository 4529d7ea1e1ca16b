"""Reading a database's tree as an auditor: the file itself, like `audit export` (no lock, no write),
stopping before an incomplete last frame and refusing a damaged log. Before anything is signed or
proved, the chain it commits to is checked: seqs 0..n-1 contiguous, genesis first (and only there,
naming the header's db_id), each prev the SHA-256 of the entry before."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..audit import PathArg, UnreadableDatabase, read_chain
from ..chain.codec import ZERO_HASH
from ..chain.tree import HashList
from ..errors import IntegrityError
from ..storage.contract import is_dsn
from ..storage.file.framing import HEADER_SIZE, HeaderError, decode_file_header
from .errors import DamagedLog, UnreadableInput
from .note import default_origin


@dataclass
class LogTree:
    """The leaves of a database's log, as read once from its file."""

    path: str
    db_id: bytes
    leaves: HashList
    head_hash: bytes
    entries: dict[int, bytes] = field(default_factory=dict)  # the exact bytes of the seqs asked for

    @property
    def size(self) -> int:
        return len(self.leaves)

    @property
    def default_origin(self) -> str:
        return default_origin(self.db_id)

    def root(self, size: int | None = None) -> bytes:
        return self.leaves.root(size)


def header_db_id(path: str) -> bytes:
    """The db_id a database names: its file header's, or, on PostgreSQL, its genesis entry's."""
    if is_dsn(path):
        for item in read_chain(path):
            db_id = item.entry.body.get("db_id")
            if item.entry.op == "genesis" and isinstance(db_id, bytes):
                return db_id
            break
        raise DamagedLog(f"{path}: the chain does not start with a genesis entry", None)
    try:
        with open(path, "rb") as f:
            data = f.read(HEADER_SIZE)
    except OSError as exc:
        raise UnreadableInput(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return decode_file_header(data)
    except HeaderError as exc:
        raise DamagedLog(f"{path}: bad file header: {exc}", 0) from None


def read_tree(db_path: PathArg, keep: Iterable[int] = ()) -> LogTree:
    """Every leaf of the log at `db_path`, and the exact bytes of the entries whose seqs are in `keep`.

    Raises UnreadableInput if the file cannot be read at all, DamagedLog if it is not one whole chain
    (run `mnemo verify` for the full report)."""
    path = os.fspath(db_path)
    wanted = set(keep)
    kept: dict[int, bytes] = {}
    data = bytearray()
    sha = hashlib.sha256
    prev = ZERO_HASH
    expected = 0
    db_id: bytes | None = None
    try:
        header_id = None
        for item in read_chain(path):
            if header_id is None:
                header_id = item.entry.body.get("db_id") if is_dsn(path) else header_db_id(path)
            e = item.entry
            item_offset = item.where
            if e.seq != expected:
                raise DamagedLog(f"{path}: entry seq {e.seq} at offset {item_offset} follows seq {expected - 1}: "
                                 "the seqs are not contiguous", item_offset)
            if e.prev != prev:
                raise DamagedLog(f"{path}: the prev of seq {e.seq} (offset {item_offset}) is not the hash of the "
                                 "entry before it", item_offset)
            if (e.seq == 0) != (e.op == "genesis"):
                what = f"seq 0 is a {e.op} entry" if e.seq == 0 else f"seq {e.seq} is a genesis entry"
                raise DamagedLog(f"{path}: {what}: the genesis comes first, and only there", item_offset)
            if e.seq == 0:
                found = e.body.get("db_id")
                if found != header_id:
                    raise DamagedLog(f"{path}: the genesis names another database than the file header", item_offset)
                db_id = header_id
            data += sha(b"\x00" + e.raw).digest()
            if e.seq in wanted:
                kept[e.seq] = e.raw
            prev = e.hash
            expected += 1
    except UnreadableDatabase as exc:
        raise UnreadableInput(str(exc)) from None
    except IntegrityError as exc:
        raise DamagedLog(str(exc), exc.offset) from None
    if db_id is None:
        raise DamagedLog(f"{path}: the log holds no entries (no genesis)", HEADER_SIZE)
    return LogTree(path, db_id, HashList(bytes(data)), prev, kept)


__all__ = ["LogTree", "read_tree"]
