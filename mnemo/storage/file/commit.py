"""Writing: the writer context that holds the writer lock around a body staging entries in a Batch,
committing it as one frame and applying it to the index (a forget made durable and erased at once),
and what a failed write or fsync leaves behind taken back."""

from __future__ import annotations

import contextlib
import os
import time

from ...errors import DurabilityError, MnemoError
from ..batch import ACL_OPS, Batch, Staged, apply_entry
from ..types import Rec
from ..writer import WriterContext
from .framing import ENTRY_HEADER, FRAME_HEADER, encode_frame_slots
from .index import Index
from .logfile import sync, write_all
from .state import StoreState


class Writes(StoreState):
    """FileStore's part that commits what a writer context staged."""

    def writing(self, transactional: bool = False, blind: bool = False) -> _Writing:
        """A context that holds the writer lock, caught up with the log, and commits what its body
        stages as one frame (nothing, if the body raises). Inside this thread's open batch it yields
        that batch and commits nothing. `transactional`: the body reads its own staged writes (see Batch).
        `blind` changes nothing here: the writer lock is local and held only while the body runs."""
        return _Writing(self, transactional)

    def _commit(self, batch: Batch) -> int:
        """Write the batch as one frame and apply it; a forget is made durable and erased right here."""
        self.check_writable()
        staged_list = batch.staged
        frame_bytes, slots = encode_frame_slots(
            [(s.entry.raw, s.payload) for s in staged_list], staged_list[0].entry.seq
        )
        offset = self.end
        forgets = any(s.entry.op == "forget" for s in staged_list)
        with self._index_lock:
            index = self.index
            try:
                write_all(self.fd, frame_bytes, offset)
                if forgets:
                    sync(self.fd)
            except DurabilityError as exc:
                self._fail(exc, offset)
                raise
            dropped: list[Rec] = []
            entry_pos = offset + FRAME_HEADER.size + ENTRY_HEADER.size
            acl_frame = False
            # Runs of puts of version 1 of records no row holds go to the index in bulk, as columns taken
            # from the staged entries (Index.new_rows, put_new); anything else, and a frame of one, goes
            # entry by entry (_apply_one).
            n, i = len(staged_list), 0
            while i < n:
                if n > 1:
                    run = index.new_rows(staged_list, slots, i, offset, entry_pos)
                    index.put_new(run)
                    i, entry_pos = run.stop, run.entry_end
                    if i == n:
                        break
                slot_pos, slot_len = slots[i]
                acl_frame = _apply_one(index, staged_list[i], offset + slot_pos, slot_len, entry_pos, dropped) \
                    or acl_frame
                entry_pos += len(staged_list[i].entry.raw) + ENTRY_HEADER.size
                i += 1
            # (the head moves once, to the frame's last entry: self.end moves only after this loop too)
            last = staged_list[-1].entry
            index.head_seq, index.head_hash = last.seq, last.hash
            index.entries += len(staged_list)
            if acl_frame:
                index.acl_frames.append(offset)
            self._grow_tree([s.entry.raw for s in staged_list], staged_list[0].entry.seq)
            self.head_ts = batch.head_ts
            end = offset + len(frame_bytes)
            group = self._group
            if group.first_unsynced is None and not forgets:
                group.first_unsynced, group.foreign_after_unsynced = offset, False
            self.end = end
            self.last_frame_offset = offset
            self._dirty_snapshot = True
            if forgets:
                group.synced_end = max(group.synced_end, end)
                group.first_unsynced = None
                regions = [(v.slot_off, v.slot_len) for rec in dropped for v in rec.versions if v.slot_len]
                try:
                    self._erase(regions)
                except (DurabilityError, OSError) as exc:
                    self._fail(exc, None)
                    raise DurabilityError(f"erasure failed: {exc}") from exc
        return end

    def _fail(self, exc: BaseException, offset: int | None) -> None:
        """A write or fsync failed: refuse further writes, and drop whatever part of the frame landed."""
        self._failed = exc
        if offset is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, offset)

    def _drop_unsynced(self) -> None:
        """fsync failed under durability="fsync": no frame we wrote since the last good fsync was
        acknowledged. Cut them from the log, so that a reopen holds exactly what was acknowledged,
        unless another process appended after them (its fsync then covered ours: leave them)."""
        group = self._group
        start = group.first_unsynced
        if self.durability != "fsync" or self.readonly or start is None or group.foreign_after_unsynced:
            return
        if not self._mutex.acquire(timeout=self.lock_timeout):
            return
        try:
            self._lock(time.monotonic() + self.lock_timeout)
            try:
                with self._index_lock:
                    if os.fstat(self.fd).st_size == self.end:
                        # Frames before the last good fsync's end were acknowledged: keep those.
                        os.ftruncate(self.fd, max(start, group.synced_end))
                        self._load()  # the index still shows the dropped writes: rebuild it
                        self._catch_up(writer=False)
                        group.first_unsynced = None
            finally:
                self._unlock()
        except (MnemoError, OSError):
            pass  # the client refuses writes anyway; a reopen sorts out what is on disk
        finally:
            self._mutex.release()


def _apply_one(index: Index, staged: Staged, slot_off: int, slot_len: int, entry_pos: int, dropped: list[Rec]) -> bool:
    """One staged entry to the index: version 1 of a record no row holds through put_one_new, anything
    else as apply_entry and hold_text apply it (the records a forget drops added to `dropped`). Whether
    the entry changes the ACL."""
    entry, _payload, tags, text = staged
    body, op = entry.body, entry.op
    if op == "put" and body["ver"] == 1 and index.row_of(rec_id := body["id"]) is None:
        index.put_one_new((rec_id, body["scope"], tags, entry.agent, body["size"], entry.seq, entry.ts_ns, entry.hash,
                           slot_off, slot_len, entry_pos, len(entry.raw), text))
        return False
    dropped.extend(apply_entry(index, entry, slot_off, slot_len, tags, entry_pos))
    if op == "put":  # recall's index takes its text (or None) from here when it catches up
        index.hold_text(body["id"], entry.seq, text)
    return op in ACL_OPS


class _Writing(WriterContext[Writes, tuple[int, int]]):
    """FileStore.writing's context (mnemo/storage/writer.py): the writer lock, then the log's lock, the
    store caught up with the log, one Batch committed as one frame and fsynced by the group commit."""

    __slots__ = ("counted",)

    def _starts(self) -> None:
        # counted in store._group.writers (for the fsync leader's wait) under durability="fsync" alone
        self.counted = self.store.durability == "fsync"
        if self.counted:
            self.store._group.enter_write()

    def _ends(self) -> None:
        if self.counted:
            self.counted = False
            self.store._group.leave_write()

    def _begin(self, deadline: float) -> Batch:
        store = self.store
        caught_up = store._lock(deadline)
        try:
            store._check_open()
            if not caught_up:
                store._catch_up(writer=True)
            return Batch(store.index, (store.index.head_seq, store.index.head_hash, store.head_ts), self.transactional)
        except BaseException:
            store._unlock()
            raise

    def _end(self, batch: Batch, commit: bool) -> tuple[int, int] | None:
        """(where the frame ends, in the log of which generation), None if nothing was committed."""
        store = self.store
        try:
            if commit:
                return store._commit(batch), store.generation
            return None
        finally:
            store._unlock()

    def _durable(self, done: tuple[int, int]) -> None:
        self.store._group.sync_upto(*done)
