"""Opening a log: creating it atomically, taking the writer lock, and loading the header, the index
(from a snapshot that belongs to the log, else empty for a replay) and the Merkle tree state."""

from __future__ import annotations

import glob
import os
import stat
import threading
import time
from typing import Any

from ..._native import readpath
from ...chain.codec import ZERO_HASH, make_entry
from ...chain.tree import CompactRange
from ...errors import IntegrityError, MnemoError, NotFound
from . import snapshot as snap
from .atomic import check_own, create_new, rename_own
from .deferred import SnapshotParts
from .framing import HEADER_SIZE, HeaderError, decode_file_header, encode_file_header, encode_frame
from .handles import LogHandle, open_regular
from .index import Index
from .index_snapshot import SnapshotRefused, load_snapshot
from .leaves import cache_path
from .logfile import NEW_DB_MODE, fsync_dir, lock_log, match_mode, pread, sync, unlock_log, write_all
from .state import StoreState
from .tree_state import TreeState


class Opening(StoreState):
    """FileStore's part that opens the log and takes and lets go of the writer lock."""

    # -- opening -------------------------------------------------------------------------------------
    def _open(self, create: bool) -> None:
        st = stat_or_none(self.path)
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise MnemoError(f"cannot open the database at {self.path}: not a regular file")
        if st is None or st.st_size == 0:
            if self.readonly or not create:
                raise NotFound(f"no Mnemo database at {self.path}")
            self._create()
        self._handles.current = LogHandle(open_regular(self.path, self.readonly))
        self._load()
        self._open_catch_up()
        with self._index_lock:
            self.index.rebase_tail()
        if self.index.head_seq < 0:
            raise IntegrityError(f"{self.path}: the log holds no genesis entry", HEADER_SIZE)
        self._group.synced_end = self.end

    def _open_catch_up(self) -> None:
        if self.readonly:
            self._catch_up(writer=False)
            return
        self._lock(time.monotonic() + self.lock_timeout)
        try:
            # Leftovers of a crash: a compaction (the old log stands), temp files that may hold tags,
            # and temp files of a creation that lost its race.
            self._remove_leftovers()
            for name in _creation_leftovers(self.path):
                snap.remove(name)
            self._match_sidecar_modes()
            # A replayed index is written as the snapshot when the store closes (or compacts), not
            # here: the replay built it in the snapshot's compact form already (Index.extend_new).
            self._catch_up(writer=True, opening=True)
        finally:
            self._unlock()

    def _remove_leftovers(self) -> bool:
        """Temp files a crashed writer may have left, each possibly holding payload bytes or tags:
        removed under the writer lock (nobody else is writing them), at open and by every forget.
        Whether there was any."""
        removed = False
        for leftover in (".compact", ".snap.tmp", ".erase.tmp"):
            removed = snap.remove(self.path + leftover) or removed
        return removed

    # -- the writer lock -----------------------------------------------------------------------------
    def _lock(self, deadline: float) -> bool:
        """Take the writer lock: an flock on the log file itself. Once held, the file at the path must
        still be the one locked; if a compaction renamed a new log over it meanwhile, follow it (after
        checking that it continues this chain) and lock that one instead.

        The handle locked through is held (LogHandles.acquire) while this thread waits for the lock and
        for as long as it holds it (_unlock releases it): another client may compact the log while this
        thread waits, and a reader thread of this store then follow the new log and retire the old
        handle. Held, that handle is closed only once this thread lets go of it; unheld, its descriptor
        would be closed under the wait (EBADF), or its number reused by another file, whose lock would
        then be taken instead.

        The file locked must be the one the path names and the one this store writes through
        (`_handles.current`). Both are asked in one hold of the index lock, under which `_handles.current`
        and `_identity` (its file's identity) are swapped together: the handle locked through must still
        be the current one, and the file at the path must be `_identity`'s. (`_identity` alone would not
        do: a reader thread that followed the new log has set it to the file the path names, while the
        lock taken is on the old one; that handle is no longer the current one.) The size of the log
        the same call reads is kept for the catch-up that follows (`_locked_size`): under the lock no
        other writer appends, so that catch-up needs no second look at the file.

        True when there is nothing to catch up with: the log ends where this store has read it, and no
        forget read since it last held the lock left slots to erase (the catch-up would do nothing)."""
        handles = self._handles
        while True:
            handle = handles.acquire()
            try:
                lock_log(handle.fd, deadline, self.path)
            except BaseException:
                handles.release(handle)
                raise
            try:
                ino, dev, size = file_state(self.path, handle.fd)  # the path's file, and the locked one's size
                with self._index_lock:
                    ours = handles.current is handle and (ino, dev) == self._identity
                    # (under the index lock: a reader thread's catch-up in progress is over)
                    caught_up = ours and size == self.end and not self._unerased
                if ours:
                    self._locked = handle  # with the hold taken above: _unlock lets go of both
                    self._locked_size = None if caught_up else size
                    return caught_up
            except BaseException:
                self._let_go(handle)
                raise
            self._let_go(handle)
            if ino < 0:
                raise MnemoError(f"the database file {self.path} was removed")
            self._reload()  # to the file the path names, unless another thread of this store did

    def _let_go(self, handle: LogHandle) -> None:
        """Let go of the writer lock held through `handle`, and of the hold on it (the descriptor of a log
        replaced meanwhile is closed then, if no read holds it either)."""
        if handle.fd >= 0:  # held, it is closed only by a close of the whole store (close_all), lock and all
            try:  # noqa: SIM105 (every write passes here: a try costs nothing, suppress() makes an object)
                unlock_log(handle.fd)
            except OSError:
                pass
        self._handles.release(handle)

    def _unlock(self) -> None:
        handle, self._locked = self._locked, None
        self._locked_size = None
        if handle is not None:
            self._let_go(handle)

    def _create(self) -> None:
        """Write header and genesis to a temp file, fsync it, and put it in place atomically: hard-linked
        to the path if none exists (a creator that loses the race finds the winner's file), or renamed
        over an empty file while holding that file's lock (others re-check after locking)."""
        db_id = os.urandom(16)
        genesis = make_entry(0, time.time_ns(), ZERO_HASH, "genesis", self.agent, {"db_id": db_id, "format": 1})
        data = encode_file_header(db_id) + encode_frame([(genesis.raw, None)])
        tmp = f"{self.path}.new{os.getpid()}-{threading.get_ident()}"
        fd = create_new(tmp, NEW_DB_MODE, leftover=True)  # this thread's name: a leftover is a dead run's
        try:
            write_all(fd, data, 0)
            sync(fd)
            made = os.fstat(fd)
        finally:
            os.close(fd)
        try:
            check_own(tmp, made)  # link() puts a link itself in place: only this file may go there
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                self._create_over_empty(tmp, made)
            fsync_dir(self.path)
        finally:
            snap.remove(tmp)

    def _create_over_empty(self, tmp: str, made: os.stat_result) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return  # removed meanwhile: the next open finds no database, or another creator's
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise MnemoError(f"cannot open the database at {self.path}: not a regular file")
            lock_log(fd, time.monotonic() + self.lock_timeout, self.path)
            now = stat_or_none(self.path)
            if now is not None and (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev) and os.fstat(fd).st_size == 0:
                rename_own(tmp, self.path, made)
        finally:
            os.close(fd)

    def _load(self, keep_tree: bool = False) -> None:
        """Read the header, then take the index from a valid snapshot or start from an empty one.
        `keep_tree`: leave the previous tree open (a reload may have to go back to it)."""
        if self.tree is not None and not keep_tree:
            self.tree.close()
            self.tree = None
        try:
            self.db_id = decode_file_header(pread(self.fd, HEADER_SIZE, 0))
        except HeaderError as exc:
            raise IntegrityError(f"{self.path}: {exc}", 0) from None
        self.index = Index(self.db_id)
        self.end = HEADER_SIZE
        self.last_frame_offset = 0
        self.head_ts = 0
        self.snapshot_used = False
        # An erasure journal means an erasure was cut short: the snapshot cannot be current then, so only
        # a replay of the log (which meets every forget again) says what must be erased.
        use = self.use_snapshot and not os.path.exists(self.erase_path)
        opened = snap.open_snapshot(self.snap_path) if use else None
        body = None if opened is None else opened[0]
        # its deferred parts (recall's text index) are read after the open, each in its own thread
        parts = None if opened is None or opened[1] is None else SnapshotParts(opened[1], opened[2])
        self.snapshot_refused = None
        if body is not None:
            try:
                loaded = load_snapshot(self.fd, self.db_id, body, parts)
            except SnapshotRefused as exc:
                loaded, self.snapshot_refused = None, str(exc)
            finally:
                if parts is not None:
                    parts.close()  # (each part loading has a descriptor of its own)
            size = _saved_tree_size(body) if loaded is not None else None
            if loaded is not None and size is not None and size == loaded[0].entries:
                self.index, self.end, self.last_frame_offset, self.head_ts = loaded
                self.snapshot_used = True
            elif loaded is not None:
                self.snapshot_refused = "its Merkle tree state is missing or does not match its index"
        self._open_tree(body["tree"] if self.snapshot_used and body is not None else None)
        if not self.snapshot_used:
            # Missing, stale or damaged: the log is the truth. The next close writes a fresh snapshot.
            self._dirty_snapshot = True
        st = os.fstat(self.fd)
        self._identity = (st.st_ino, st.st_dev)

    def _open_tree(self, saved: bytes | None) -> None:
        """The tree as of the index just loaded: from the snapshot's compact range, or empty for a replay
        from seq 0 (which adds every entry). The leaf-hash cache DB.leaves beside the log is opened with
        it, and set aside (then rebuilt by a writer) if it does not match."""
        self.tree = TreeState(self.path, self.db_id, saved=saved, readonly=self.readonly)

    def _log_mode(self) -> int:
        """The log's permission bits, which the files that hold what it holds (its compacted copy, the
        snapshot with the index's ids and tags) take, so that they are never readable by more."""
        return os.fstat(self.fd).st_mode & 0o777  # not setuid, setgid or sticky: no sidecar wants them

    def _match_sidecar_modes(self) -> None:
        """Give the snapshot and the leaf-hash cache the log's permission bits, at a writer's open: a log
        chmod-ed since they were written (a `chmod 600` of a database shared until then) is no more
        readable through them. Never through a link (opened with O_NOFOLLOW, checked regular). A
        sidecar this process may not chmod is left as it is: the snapshot takes the log's mode when it
        is next written, the cache when a writer that may chmod it opens."""
        mode = self._log_mode()
        for name in (self.snap_path, cache_path(self.path)):
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue  # missing, or a link: not ours to change
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    match_mode(fd, mode)
            except OSError:
                pass  # not this process's file to chmod
            finally:
                os.close(fd)


def _saved_tree_size(body: dict[str, Any]) -> int | None:
    """The tree size a snapshot's compact range is of, or None if it holds none that is well-formed."""
    try:
        return CompactRange.from_bytes(body["tree"]).size
    except Exception:  # missing, or not a compact range: the snapshot cannot be continued from
        return None


def stat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def _creation_leftovers(path: str) -> list[str]:
    """Temp files of creations whose process is gone (they hold a genesis entry and nothing else); a
    running creator's file is left alone, whatever its state."""
    out = []
    for name in glob.glob(glob.escape(path) + ".new*"):
        pid = name[len(path) + 4 :].split("-", 1)[0]
        # a creator's pid: ASCII digits (not `²`, which int() refuses) within pid_t (os.kill overflows past it)
        if not (pid.isascii() and pid.isdigit()) or int(pid) > 2**31 - 1:
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            out.append(name)
        except OSError:
            pass  # alive, but not ours to signal
    return out


def log_file_state(path: str, fd: int) -> tuple[int, int, int]:
    """(st_ino, st_dev) of the file at `path`, (-1, -1) if there is none, and the size of the file `fd`
    has open: os.stat and os.fstat, which raise OSError as they do. The pure-Python twin of
    mnemo/_readpath.c's file_state, which makes the two calls in one, without their result objects."""
    st = stat_or_none(path)
    size = os.fstat(fd).st_size
    return (-1, -1, size) if st is None else (st.st_ino, st.st_dev, size)


file_state = log_file_state if readpath is None else readpath.file_state
