"""Compaction and erasure: rewriting the log without erased payload bytes, and zeroing the payload
slots of forgotten records in place, each crash-safely (a crash leaves the old log, or a forget in the
log's last frame whose erasure the next writer finishes)."""

from __future__ import annotations

import contextlib
import os
import time

from ...errors import DurabilityError, IntegrityError, MnemoError
from . import snapshot as snap
from .atomic import rename_own
from .framing import HEADER_SIZE, SLOT_CRC, encode_file_header, encode_frame
from .handles import LogHandle
from .logfile import fsync_dir, iter_frames, lock_log, match_mode, pread, sync, write_all
from .state import StoreState

ZEROS_PER_WRITE = 1 << 20  # the most one write of an erasure zeroes


class Compaction(StoreState):
    """FileStore's part that compacts the log and erases forgotten payloads."""

    # -- compaction ----------------------------------------------------------------------------------
    def compact(self) -> dict[str, int]:
        """Rewrite the log without erased payload bytes, keeping every entry and hash. Crash-safe: the
        new log is written beside the old one, fsynced, and renamed over it."""
        if self.current_batch() is not None:
            raise MnemoError("compact() cannot run inside a transaction")
        tmp = self.path + ".compact"
        with self.writing():
            before = self.end
            try:
                self._rewrite(tmp)
            except (DurabilityError, OSError) as exc:
                # The old log stands unless the rename happened; either way, stop writing until a reopen
                # has looked at what is on disk.
                self._failed = exc
                snap.remove(tmp)
                raise DurabilityError(f"compaction failed: {exc}") from exc
            self._write_snapshot()
        return {"bytes_before": before, "bytes_after": self.end, "reclaimed": before - self.end}

    def _rewrite(self, tmp: str) -> None:
        """Copy the log to `tmp` without erased slots, fsync it, rename it over the log, and reload.
        The new file is locked before it is renamed into place, so the writer lock never lapses: a
        writer waiting on the old file finds, once it gets that lock, that the path names another
        file, and moves on to wait for this one. The rename and the reload that adopts the new file are
        one step for this store's other threads (the index lock is held from one to the other): a thread
        refreshing in between would follow the new file itself, retiring (closing) the handle of the old
        one while this writer still holds the lock through it, and is about to let go of that lock."""
        # Made fresh, never through a link at its name (a leftover is removed first), and private until
        # its mode is set; renamed over the log only while the name is still this file (rename_own).
        snap.remove(tmp)
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        handle = LogHandle(fd)
        with contextlib.ExitStack() as adopting:
            try:
                out = HEADER_SIZE
                write_all(fd, encode_file_header(self.db_id), 0)
                forgotten = self.index.forgotten
                for frame, buf, pos in iter_frames(self.fd, HEADER_SIZE, self.end):
                    items: list[tuple[bytes, bytes | None]] = []
                    for entry, slot in zip(frame.entries, frame.slots, strict=True):
                        payload = None
                        if slot.state == "ok" and not (entry.op == "put" and entry.body["id"] in forgotten):
                            start = pos + (slot.offset - frame.offset) + SLOT_CRC.size
                            payload = bytes(buf[start : start + slot.length - SLOT_CRC.size])
                        elif slot.state == "bad":
                            raise IntegrityError(f"{self.path}: payload slot damaged at offset {slot.offset}",
                                                 slot.offset)
                        items.append((entry.raw, payload))
                    data = encode_frame(items, frame.entries[0].seq)
                    write_all(fd, data, out)
                    out += len(data)
                # The log's permission bits as they are now (a chmod during the copy counts): a chmod 600
                # outlives the compaction. Owner and group are the compacting process's.
                match_mode(fd, self._log_mode())
                sync(fd)
                lock_log(fd, time.monotonic(), tmp)  # nobody else opens DB.compact: free at once
                adopting.enter_context(self._index_lock)  # until the new file is adopted (see above)
                old = self._handles.current
                rename_own(tmp, self.path, os.fstat(fd))
            except BaseException:
                os.close(fd)
                snap.remove(tmp)  # it holds every payload: never leave it behind, whatever stopped the copy
                raise
            # The new file is the log now, and its lock is this store's to let go (writing() does, however
            # what follows ends): else a failure below would leave the database locked until exit.
            self._unlock()
            self._locked = self._handles.hold(handle)  # held as Opening._lock holds the handle it locks
            snap.remove(self.snap_path)
            self._reload(adopt=handle)
        self._catch_up(writer=True)
        fsync_dir(self.path)
        assert self._handles.current is handle and old is not handle

    # -- erasure -------------------------------------------------------------------------------------
    def _redo_erasure(self) -> None:
        """Finish any erasure a crash interrupted: slots of records that forgets read from the log since
        this store last held the lock dropped, where not yet zero. Only those: a journal on its own
        never makes anything be zeroed (see _journal). When the log ends with a forget another client
        wrote, the slots it dropped are zeroed again even where they read as zeros: those zeros may be in
        the page cache only (their writer died before their fsync, or the fsync failed), and are made
        durable here, before this writer appends a frame after that forget."""
        journal = self._journal()
        # A slot the journal names may read as zeros that never reached the disk: it is zeroed again,
        # and synced, like one that still holds bytes.
        regions = [
            (off, length) for off, length in self._unerased
            if (journal is not None and (off, length) in journal) or any(pread(self.fd, length, off))
        ]
        tail = self._read_forget_slots if 0 <= self._read_forget_at == self.last_frame_offset else []
        again = sorted(set(tail).difference(regions))
        self._unerased, self._read_forget_at, self._read_forget_slots = [], -1, []
        if regions:
            self._erase(regions + again)
            self.recovery.append(f"completed an interrupted erasure of {len(regions)} payload slots")
            return
        if again:
            # Zeros already read back: only made durable, a precaution, not a recovery to report. The
            # snapshot stays: the forget's writer removed the one it found (durably) before its zeros,
            # and any written since was caught up with the forget, so it holds nothing the forget dropped.
            self._zero(again)
            self._handles.drain(self.path, self.lock_timeout)
        if journal is not None:
            snap.remove(self.erase_path)

    def _clear_for_erasure(self) -> None:
        """Before a forget: remove the snapshot (it holds tags of the records forgotten) and every
        leftover temp file, and make the removal durable when there was anything to remove (in the
        common case, a store that has not closed since it opened, there is no snapshot and no fsync)."""
        removed = snap.remove(self.snap_path)
        if self._remove_leftovers() or removed:
            fsync_dir(self.path)

    def _erase(self, regions: list[tuple[int, int]]) -> None:
        """Overwrite payload slots with zeros, crash-safely: the forget that names their records is
        durable in the log first, then the zeros are written and fsynced, before anything else is
        appended, so a slot a crash left part-way zeroed is always one that the log's last frame
        forgets (docs/FORMAT.md §3, Erasure). Then nothing else of this database may keep the erased
        bytes: the snapshot (it holds tags) and every leftover temp file are gone, and every descriptor
        of a replaced log this process still holds is closed."""
        self._clear_for_erasure()
        self._zero(regions)
        snap.remove(self.erase_path)  # a journal an earlier version left (it is never written now)
        self._dirty_snapshot = True
        self._handles.drain(self.path, self.lock_timeout)

    def _zero(self, regions: list[tuple[int, int]]) -> None:
        """Write zeros over the regions and fsync the log."""
        for off, length in _runs(regions):
            for start in range(off, off + length, ZEROS_PER_WRITE):
                write_all(self.fd, bytes(min(ZEROS_PER_WRITE, off + length - start)), start)
        sync(self.fd)


def _runs(regions: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The regions (offset, length) merged where one ends exactly where the next starts: the slots of
    one frame lie back to back, so a directory forgotten at once is zeroed in a few writes, not one
    per record. Regions never merge across a gap, which holds entries."""
    runs: list[tuple[int, int]] = []
    for off, length in sorted(regions):
        if runs and runs[-1][0] + runs[-1][1] == off:
            runs[-1] = (runs[-1][0], runs[-1][1] + length)
        else:
            runs.append((off, length))
    return runs
