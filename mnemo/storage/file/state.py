"""What the parts of FileStore share: the store's state, and the methods each part calls on the others.

FileStore (store.py) is one class made of parts, each in its own module and each a base class of it:
opening and the writer lock (opening.py), catching up with the log (replay.py), writes (commit.py),
compaction and erasure (compaction.py), the index snapshot (index_snapshot.py) and reads (reads.py).
They work on the state set up here. Two parts keep state of their own and are objects the store holds:
its log descriptors (handles.py) and its fsync leader (group_commit.py).
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ..guards import StoreGuards
from .frame_marks import FrameMarks
from .group_commit import GroupCommit
from .handles import LogHandle, LogHandles
from .index import Index

if TYPE_CHECKING:
    from ..batch import Batch


class StoreState(StoreGuards):
    # Set by _load, which every open runs before anything reads them.
    db_id: bytes
    end: int  # where the last frame read or written ends
    last_frame_offset: int
    _identity: tuple[int, int]  # (st_ino, st_dev) of the log file this store has open
    open_seconds: float

    def __init__(
        self, path: str, agent: str, readonly: bool, durability: str, lock_timeout: float, use_snapshot: bool,
        group_commit_wait: float | None,
    ) -> None:
        super().__init__(readonly, durability, lock_timeout)
        self.path = path
        self.agent = agent
        self.recovery: list[str] = []
        self.use_snapshot = use_snapshot
        self.snapshot_used = False
        self._snapshot_refused: str | None = None  # why a snapshot of this log was not loaded
        self._index_lock = threading.RLock()  # short critical sections: index reads and updates
        self._dirty_snapshot = False
        self._erased_live: set[str] = set()  # puts seen with an erased slot, awaiting their forget
        # Slots of records dropped by forgets read from the log (written by others): a writer checks
        # they were erased, and completes the erasure if their writer crashed first.
        self._unerased: list[tuple[int, int]] = []
        # Slots read failing their checksum in this catch-up, offset -> (length, offset of the frame whose
        # forget dropped their version, or -1): a part-way erasure if that frame is the log's last
        # (Replay._check_part_erased), else damage.
        self._part_erased: dict[int, tuple[int, int]] = {}
        # The offset of the last frame holding a forget that a catch-up read (written by another client):
        # if it is still the log's last frame, its erasure may not have reached the disk yet.
        self._read_forget_at = -1
        self._read_forget_slots: list[tuple[int, int]] = []  # the slots that frame's forgets dropped
        self._handles = LogHandles()  # the descriptors of the log, the current one and those replaced
        self._group = GroupCommit(self, self._handles, self._index_lock, group_commit_wait)  # the fsync leader
        self._locked: LogHandle | None = None  # the handle (held) whose file this store holds the writer lock on
        # The log's size as of taking that lock (Opening._lock), until the writer's catch-up uses it. Shared
        # by the threads, and safe so: only a thread holding _mutex sets it (_lock), uses it (_catch_up
        # with writer=True) or clears it (_unlock); a reader's catch-up never looks at it; and the open
        # sets and uses it before any other thread has the store, as close clears it after the last write.
        self._locked_size: int | None = None
        self.generation = 0
        self.index = Index()  # until _load reads the real one
        self.tree: Any = None  # the TreeState of the Merkle tree over the entries (mnemo.transparency)
        self.head_ts = 0
        self._frame_marks = FrameMarks()  # where a read of the log from a seq on starts (log(since))

    @property
    def snapshot_refused(self) -> str | None:
        """Why a snapshot of this log was not loaded, or why its text part, loaded after the open, was
        refused (asking waits for that part to load)."""
        if self._snapshot_refused is not None:
            return self._snapshot_refused
        self.index.text  # noqa: B018 (waits for the snapshot's text part, if it is still loading)
        refused = self.index.text_refused
        return None if refused is None else f"its text part: {refused}"

    @snapshot_refused.setter
    def snapshot_refused(self, reason: str | None) -> None:
        self._snapshot_refused = reason

    @property
    def snap_path(self) -> str:
        return self.path + ".snap"

    @property
    def erase_path(self) -> str:
        return self.path + ".erase"

    @property
    def fd(self) -> int:
        """The descriptor of the current log file (writes, replay; reads take one from _handles)."""
        return self._handles.current.fd

    if TYPE_CHECKING:  # what the parts call on one another, each defined by the part named
        # opening
        def _lock(self, deadline: float) -> bool: ...
        def _unlock(self) -> None: ...
        def _load(self, keep_tree: bool = False) -> None: ...
        def _remove_leftovers(self) -> bool: ...
        def _log_mode(self) -> int: ...
        # replay
        def refresh(self) -> None: ...
        def _catch_up(self, writer: bool, opening: bool = False) -> None: ...
        def _reload(self, adopt: LogHandle | None = None) -> None: ...
        def _journal(self) -> set[tuple[int, int]] | None: ...
        def _grow_tree(self, entries: list[bytes], first_seq: int) -> None: ...
        # commit
        def writing(self, transactional: bool = False, blind: bool = False) -> AbstractContextManager[Batch]: ...
        def _drop_unsynced(self) -> None: ...
        # compaction
        def _redo_erasure(self) -> None: ...
        def _erase(self, regions: list[tuple[int, int]]) -> None: ...
        # index_snapshot
        def _write_snapshot(self) -> dict[str, Any] | None: ...
