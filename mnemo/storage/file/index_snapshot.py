"""A store's index snapshot (DB.snap): written from its index and Merkle tree state, and loaded back only
where it belongs to the log, with the ACL replayed from the log's own frames."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ...acl import Acl
from ...errors import DurabilityError
from ..batch import ACL_OPS, ChainError
from . import snapshot as snap
from .deferred import SnapshotParts
from .framing import FRAME_HEADER, HEADER_SIZE, FrameError, frame_length, parse_frame
from .index import Index
from .logfile import pread
from .state import StoreState


class Snapshots(StoreState):
    """FileStore's part that writes its index snapshot."""

    def _write_snapshot(self) -> dict[str, Any] | None:
        """Write DB.snap; returns the index state written (None if none was)."""
        if self.readonly or self.last_frame_offset == 0:
            return None
        with self._index_lock:  # a reader may be indexing text (search.py) under this lock alone
            state = self.index.to_state()
        assert self.tree is not None
        body = {
            "db_id": self.db_id,
            "offset": self.end,
            "frame_offset": self.last_frame_offset,
            "head_ts": self.head_ts,
            "index": state,
            "tree": self.tree.to_bytes(),
        }
        self.tree.flush()
        try:
            snap.write_snapshot(self.snap_path, body, self._log_mode())
            self._dirty_snapshot = False
        except (OSError, DurabilityError):
            return None  # a snapshot only speeds up the next open: a full disk must not stop one
        return state

    def save_snapshot(self) -> None:
        """Write the index snapshot now (under the writer lock, caught up, so it never resurrects
        what another process forgot)."""
        with self.writing():
            self._write_snapshot()


class SnapshotRefused(ValueError):
    """A snapshot that belongs to the log (it ends at the log's frame with its head hash) but cannot be
    loaded as it stands: malformed, or forged. The log is replayed instead, and verify reports it."""


def load_snapshot(
    fd: int, db_id: bytes, body: dict[str, Any], parts: SnapshotParts | None = None
) -> tuple[Index, int, int, int] | None:
    """(index, end offset, last frame offset, head ts) of a snapshot that belongs to the log open as
    `fd` and ends at one of its frames; None when it is stale (of another db, or not ending at a frame
    of this log with the head it names); SnapshotRefused when it ends there but cannot be loaded.

    The ACL is never taken from the snapshot: it is rebuilt from the genesis, grant and revoke entries
    of the log itself, at the frame offsets the snapshot lists (a listed offset that is not such a
    frame refuses the snapshot). What else it holds is trusted only as far as `verify` checks it
    against the log, and reads check each payload against its chain entry (FileStore.read_packed). Its
    deferred parts are read from `parts` after the open (deferred.py)."""
    try:
        if body["db_id"] != db_id:
            return None
        off, start = int(body["offset"]), int(body["frame_offset"])
        if not (HEADER_SIZE <= start < off <= os.fstat(fd).st_size):
            return None
        frame = parse_frame(pread(fd, off - start, start), 0, start)
        last = frame.entries[-1]
        state = body["index"]
        if not (frame.end == off and last.seq == state["head_seq"] and last.hash == state["head_hash"]):
            return None
    except (FrameError, KeyError, TypeError, ValueError, OverflowError):
        return None
    try:
        index = Index.from_state(db_id, state, parts)
        index.acl = acl_from_frames(fd, index.acl_frames, off)
        return index, off, start, int(body["head_ts"])
    except (FrameError, ChainError, KeyError, TypeError, ValueError, IndexError, UnicodeError, OverflowError) as exc:
        raise SnapshotRefused(str(exc) or type(exc).__name__) from None


def acl_from_frames(fd: int, offsets: Iterable[int], end: int) -> Acl:
    """The ACL replayed from the genesis, grant and revoke entries of the frames at `offsets` (in
    order, the first being the genesis frame). Raises ChainError if any is not such a frame."""
    acl = Acl()
    last_seq = -1
    first = True
    for off in offsets:
        if not (HEADER_SIZE <= off < end) or (first and off != HEADER_SIZE):
            raise ChainError(f"no ACL frame at offset {off}")
        total = frame_length(pread(fd, FRAME_HEADER.size, off), 0, off)
        if off + total > end:
            raise ChainError(f"the ACL frame at offset {off} runs past the snapshot's end")
        frame = parse_frame(pread(fd, total, off), 0, off)
        if frame.entries[0].seq <= last_seq or (first and frame.entries[0].op != "genesis"):
            raise ChainError(f"the ACL frame at offset {off} is out of order")
        if not any(entry.op in ACL_OPS for entry in frame.entries):
            raise ChainError(f"the frame at offset {off} holds no genesis, grant or revoke entry")
        for entry in frame.entries:
            body = entry.body
            if entry.op == "genesis":
                if entry.seq != 0:
                    raise ChainError("genesis after seq 0")
                acl.owner = entry.agent
            elif entry.op == "grant":
                acl.grant(_name(body["principal"]), _name(body["scope"]), _perms(body["perms"]))
            elif entry.op == "revoke":
                acl.revoke(_name(body["principal"]), _name(body["scope"]), _perms(body["perms"]))
        last_seq = frame.entries[-1].seq
        first = False
    if first:
        raise ChainError("the snapshot lists no genesis frame")
    return acl


def _name(value: Any) -> str:
    if not isinstance(value, str):
        raise ChainError("an ACL entry names a non-string")
    return value


def _perms(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise ChainError("an ACL entry's perms are not a list of strings")
    return value
