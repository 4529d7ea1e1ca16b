"""The embedded backend: one log file, its indexes, the single-writer commit path, recovery and erasure.

`FileStore` implements the storage contract (mnemo/storage/contract.py): `writing()` yields a Batch to
stage entries in, committed as one frame; `refresh()` catches up with frames other processes appended;
reads look records up in the in-memory index and read their payload slots from the log, checked
against the chain.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import stat
import threading
import time
import zlib
from array import array
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ...acl import Acl
from ...chain.codec import (
    SALT_SIZE,
    ZERO_HASH,
    Entry,
    decode_put_payload,
    decode_record_fields,
    make_entry,
    served_put_problem,
)
from ...chain.tree import HASH_SIZE, CompactRange
from ...errors import (
    DurabilityError,
    ErasureIncomplete,
    IntegrityError,
    LockTimeout,
    MnemoError,
    NotFound,
)
from ...record import Problem
from ..batch import ACL_OPS, Batch, ChainError, apply_entry
from ..gc_pause import gc_paused, release_freed_memory
from ..guards import StoreGuards
from ..types import (
    BATCH_INTERVAL,
    DURABILITY_MODES,
    Found,
    LogItem,
    Payloads,
    Progress,
    Query,
    Rec,
    ScopeFilter,
    Usage,
    Version,
    check_durability,
    check_group_commit_wait,
)
from . import snapshot as snap
from .framing import (
    ENTRY_HEADER,
    FRAME_HEADER,
    HEADER_SIZE,
    MAX_FRAME,
    SLOT_CRC,
    Frame,
    FrameError,
    HeaderError,
    Slot,
    decode_file_header,
    encode_file_header,
    encode_frame,
    encode_frame_slots,
    frame_length,
    parse_frame,
    slot_state,
)
from .index import COLUMNS, Index
from .leaves import cache_path
from .logfile import (
    SCAN_CHUNK,
    FrameReader,
    LogHandle,
    after_damage,
    complete_with_damaged_length,
    frame_holding,
    fsync_dir,
    iter_frames,
    lock_log,
    match_mode,
    read_exact,
    sync,
    unlock_log,
    write_all,
)
from .reader import read_log
from .scan import LEAVES, ScanResult, scan_frames
from .tree_state import TreeState
from .verify import verify_db_and_index

if TYPE_CHECKING:
    from ...chain.rules import ExpectedIndex
    from ...record import VerifyReport

_NO_SCOPE = ""  # not a valid scope, so no record is in it (and no filter admits it)
# How long the thread about to fsync waits, while other threads are inside a write, for them to finish
# it so that the one fsync covers theirs too: well under the cost of an fsync, so a lone writer (who
# never waits) and a group both come out ahead. 0 turns the wait off.
GROUP_COMMIT_WAIT = 0.0005
REBASE_ROWS = 10_000
ZEROS_PER_WRITE = 1 << 20  # the most one write of an erasure zeroes


class FileStore(StoreGuards):
    def __init__(
        self, path: str, agent: str, *, readonly: bool = False, durability: str = "fsync",
        lock_timeout: float = 10.0, create: bool = True, use_snapshot: bool = True,
        group_commit_wait: float | None = None,
    ) -> None:
        check_durability(durability)
        check_group_commit_wait(group_commit_wait)
        self.path = path
        self.agent = agent
        self.readonly = readonly
        self.durability = durability
        self.lock_timeout = lock_timeout
        self.recovery: list[str] = []
        self.use_snapshot = use_snapshot
        self.snapshot_used = False
        self.snapshot_refused: str | None = None  # why a snapshot of this log was not loaded
        self.closed = False
        self._failed: BaseException | None = None
        self._mutex = threading.RLock()  # one writer thread at a time, held through a transaction
        self._index_lock = threading.RLock()  # short critical sections: index reads and updates
        self._local = threading.local()
        sync_lock = threading.RLock()
        self._sync_cond = threading.Condition(sync_lock)
        # The fsync leader's wait for writers in progress: same lock, so that a writer's last step
        # wakes only the leader, not every thread waiting for the fsync.
        self._writers_done = threading.Condition(sync_lock)
        self._writers = 0  # threads inside a write (from asking for the writer lock to their commit)
        self.group_commit_wait = GROUP_COMMIT_WAIT if group_commit_wait is None else float(group_commit_wait)
        self.fsyncs = 0  # fsyncs of the log by the commit path (group commit folds many writes into one)
        self._fsync_seconds = GROUP_COMMIT_WAIT  # how long one takes, averaged over the last few
        self._syncing = False
        self._synced_end = 0
        self._first_unsynced: int | None = None  # offset of our first frame not yet covered by an fsync
        self._foreign_after_unsynced = False  # another process appended after it
        self._dirty_snapshot = False
        self._erased_live: set[str] = set()  # puts seen with an erased slot, awaiting their forget
        # Slots of records dropped by forgets read from the log (written by others): a writer checks
        # they were erased, and completes the erasure if their writer crashed first.
        self._unerased: list[tuple[int, int]] = []
        self._batch_thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._handle = LogHandle(-1)
        self._retired: list[LogHandle] = []  # replaced logs still being read through (see LogHandle)
        self._handle_lock = threading.Lock()
        self._handle_idle = threading.Condition(self._handle_lock)
        self._locked: LogHandle | None = None  # the handle whose file this store holds the writer lock on
        self.generation = 0
        self.index = Index()  # until _load reads the real one
        self.tree: Any = None  # the TreeState of the Merkle tree over the entries (mnemo.transparency)
        self.head_ts = 0
        self._rebased = False
        try:
            t0 = time.perf_counter()
            with gc_paused():
                self._open(create)
            if self._rebased:
                release_freed_memory()  # what the replay built and the rebase let go of
            self.open_seconds = time.perf_counter() - t0
        except OSError as exc:
            self._close_files()
            raise MnemoError(f"cannot open the database at {path}: {exc.strerror or exc}") from exc
        except BaseException:
            self._close_files()
            raise
        if durability == "batch" and not readonly:
            self._batch_thread = threading.Thread(target=self._batch_syncer, daemon=True, name="mnemo-sync")
            self._batch_thread.start()

    # -- opening -------------------------------------------------------------------------------------
    @property
    def snap_path(self) -> str:
        return self.path + ".snap"

    @property
    def erase_path(self) -> str:
        return self.path + ".erase"

    @property
    def fd(self) -> int:
        """The descriptor of the current log file (writes, replay; readers go through _read_at)."""
        return self._handle.fd

    def _open(self, create: bool) -> None:
        st = _stat_or_none(self.path)
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise MnemoError(f"cannot open the database at {self.path}: not a regular file")
        if st is None or st.st_size == 0:
            if self.readonly or not create:
                raise NotFound(f"no Mnemo database at {self.path}")
            self._create()
        self._handle = LogHandle(_open_regular(self.path, self.readonly))
        self._load()
        self._open_catch_up()
        if self.index.head_seq < 0:
            raise IntegrityError(f"{self.path}: the log holds no genesis entry", HEADER_SIZE)
        self._synced_end = self.end

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
            self._catch_up(writer=True, opening=True)
            if self._dirty_snapshot:
                state = self._write_snapshot()
                if state is not None and len(self.index.extra) >= REBASE_ROWS:
                    # Rows replayed from the log each hold a dict entry and an id string; loaded
                    # from the snapshot's form they share one sorted blob, half the memory.
                    index = Index.from_state(self.db_id, state)
                    index.acl = self.index.acl
                    self.index = index
                    self._rebased = True
        finally:
            self._unlock()

    def _remove_leftovers(self) -> None:
        """Temp files a crashed writer may have left, each possibly holding payload bytes or tags:
        removed under the writer lock (nobody else is writing them), at open and by every forget."""
        for leftover in (".compact", ".snap.tmp", ".erase.tmp"):
            snap.remove(self.path + leftover)

    # -- the writer lock -----------------------------------------------------------------------------
    def _lock(self, deadline: float) -> None:
        """Take the writer lock: an flock on the log file itself. Once held, the file at the path must
        still be the one locked; if a compaction renamed a new log over it meanwhile, follow it (after
        checking that it continues this chain) and lock that one instead."""
        while True:
            handle = self._handle
            lock_log(handle.fd, deadline, self.path)
            st = _stat_or_none(self.path)
            if st is not None and (st.st_ino, st.st_dev) == self._identity:
                self._locked = handle
                return
            unlock_log(handle.fd)
            if st is None:
                raise MnemoError(f"the database file {self.path} was removed")
            self._reload()

    def _unlock(self) -> None:
        handle, self._locked = self._locked, None
        if handle is not None and handle.fd >= 0:
            with contextlib.suppress(OSError):
                unlock_log(handle.fd)

    def _create(self) -> None:
        """Write header and genesis to a temp file, fsync it, and put it in place atomically: hard-linked
        to the path if none exists (a creator that loses the race finds the winner's file), or renamed
        over an empty file while holding that file's lock (others re-check after locking)."""
        db_id = os.urandom(16)
        genesis = make_entry(0, time.time_ns(), ZERO_HASH, "genesis", self.agent, {"db_id": db_id, "format": 1})
        data = encode_file_header(db_id) + encode_frame([(genesis.raw, None)])
        tmp = f"{self.path}.new{os.getpid()}-{threading.get_ident()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, data, 0)
            sync(fd)
        finally:
            os.close(fd)
        try:
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                self._create_over_empty(tmp)
            fsync_dir(self.path)
        finally:
            snap.remove(tmp)

    def _create_over_empty(self, tmp: str) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return  # removed meanwhile: the next open finds no database, or another creator's
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise MnemoError(f"cannot open the database at {self.path}: not a regular file")
            lock_log(fd, time.monotonic() + self.lock_timeout, self.path)
            now = _stat_or_none(self.path)
            if now is not None and (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev) and os.fstat(fd).st_size == 0:
                os.replace(tmp, self.path)
        finally:
            os.close(fd)

    def _load(self, keep_tree: bool = False) -> None:
        """Read the header, then take the index from a valid snapshot or start from an empty one.
        `keep_tree`: leave the previous tree open (a reload may have to go back to it)."""
        if self.tree is not None and not keep_tree:
            self.tree.close()
            self.tree = None
        try:
            self.db_id = decode_file_header(read_exact(self.fd, 0, HEADER_SIZE))
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
        body = snap.read_snapshot(self.snap_path) if use else None
        self.snapshot_refused = None
        if body is not None:
            try:
                loaded = load_snapshot(self.fd, self.db_id, body)
            except SnapshotRefused as exc:
                loaded, self.snapshot_refused = None, str(exc)
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

    def _grow_tree(self, entries: list[bytes], first_seq: int) -> None:
        assert self.tree is not None
        try:
            self.tree.add(entries, first_seq)
        except MnemoError as exc:  # StaleCache: the tree and the index disagree; only a bug gets here
            raise IntegrityError(f"{self.path}: the Merkle tree does not follow the log: {exc}") from None

    def tree_head(self) -> tuple[int, bytes]:
        with self._index_lock:
            assert self.tree is not None
            head = self.tree.head()
            return head.size, head.root

    # -- catching up with the log --------------------------------------------------------------------
    def _catch_up(self, writer: bool, opening: bool = False) -> None:
        """Apply frames appended since self.end. A writer cuts a torn tail; damage raises."""
        with self._index_lock:
            st = _stat_or_none(self.path)
            if st is not None and (st.st_ino, st.st_dev) != self._identity:
                self._reload()
            size = os.fstat(self.fd).st_size
            if size < self.end:
                raise IntegrityError(f"{self.path}: log is shorter ({size}) than already read ({self.end})", size)
            if size == self.end:
                if opening or (writer and self._unerased):
                    self._redo_erasure()
                return
            journal = self._journal()
            if self._first_unsynced is not None:
                self._foreign_after_unsynced = True
            while True:
                try:
                    self._read_frames(size, journal, writer)
                except FrameError as exc:
                    self._torn_or_damaged(exc, size, writer)
                # A reader found a put's payload erased and not yet its forget. The forget was durable
                # in the file before a byte of the payload was zeroed, so it lies past `size`, appended
                # after the size was taken: read on to it. (A writer holds the lock: nothing is appended.)
                if writer or not self._awaiting_forget():
                    break
                grown = os.fstat(self.fd).st_size
                if grown <= size:
                    break
                size = grown
            self._check_erased_live()
            if writer:
                self._redo_erasure()

    def _read_frames(self, size: int, journal: set[tuple[int, int]] | None, writer: bool) -> None:
        """Apply the frames from self.end up to `size`; FrameError at the first that cannot be read."""
        reader = FrameReader(self.fd, self.end, size, SCAN_CHUNK)
        while reader.offset < size:
            if self.index.head_seq >= 0 and self._apply_scanned(reader):
                continue
            frame, buf, pos = reader.next()
            dropped = self._apply_frame(frame, buf, pos, journal, writer)
            for rec in dropped:
                self._unerased.extend((v.slot_off, v.slot_len) for v in rec.versions if v.slot_len)
            if dropped and self.snapshot_used:
                self._dirty_snapshot = True  # it may hold tags of what was forgotten

    def _awaiting_forget(self) -> bool:
        """Whether a live record's payload was read erased (its forget not read yet)."""
        return any(self.index.has(i) for i in self._erased_live)

    def _torn_or_damaged(self, exc: FrameError, size: int, writer: bool) -> None:
        """A frame that cannot be read: a torn last write (cut it) or damage (raise, change nothing).

        Only a frame that stops short of its own declared length, with no frame of the chain after it
        (logfile.after_damage: never one inside its own payloads, whatever seq it claims), is a torn
        write: an append cut off by a crash leaves a prefix of its frame. A complete frame that fails
        its checksum was written whole, and an fsynced one may have been acknowledged: that is damage,
        never cut."""
        where = f"{self.path}: damaged frame at offset {exc.offset} ({exc})"
        if exc.offset == HEADER_SIZE:
            # Creation is atomic (write, fsync, rename), so a bad genesis frame is damage, never a tear.
            raise IntegrityError(
                f"{self.path}: the genesis frame at offset {exc.offset} is damaged ({exc})", exc.offset
            )
        if exc.kind != "incomplete":
            raise IntegrityError(f"{where}: a complete frame that fails its checks is damage", exc.offset)
        # Frames of the chain after it mean damage; frames inside its own payloads (a record may hold a
        # copy of a Mnemo log, or a forged frame) are content, whatever seq they claim.
        after = after_damage(self.fd, exc.offset, size, (self.index.head_seq, self.index.head_hash))
        if after.resume is not None:
            raise IntegrityError(f"{where}; valid frames follow it", exc.offset)
        if after.whole or complete_with_damaged_length(self.fd, exc.offset, size):
            raise IntegrityError(f"{where}: the whole frame is there, with damaged length fields", exc.offset)
        if not writer and os.fstat(self.fd).st_size > size:
            return  # a write in progress when the size was taken, perhaps the forget of an erased payload
        if self._awaiting_forget():
            # Payloads are zeroed only once their forget is durable, so that forget was no torn write.
            raise IntegrityError(f"{where}; it held a durable forget", exc.offset)
        if not writer:
            return  # perhaps a write in progress: stop before it
        cut = size - exc.offset
        os.ftruncate(self.fd, exc.offset)
        sync(self.fd)
        self.recovery.append(f"cut a torn last frame at offset {exc.offset} ({cut} bytes): {exc}")

    def _apply_frame(
        self, frame: Frame, buf: memoryview, pos: int, journal: set[tuple[int, int]] | None, writer: bool
    ) -> list[Rec]:
        index = self.index
        items: list[tuple[Entry, Slot, int, tuple[str, ...]]] = []
        entry_off = frame.offset + FRAME_HEADER.size
        acl_frame = False
        for entry, slot in zip(frame.entries, frame.slots, strict=True):
            entry_off += ENTRY_HEADER.size
            if (entry.seq == 0) != (entry.op == "genesis"):
                raise IntegrityError(f"{self.path}: seq {entry.seq} is a {entry.op} entry at offset {frame.offset}",
                                     frame.offset)
            if entry.seq == 0 and entry.body.get("db_id") != self.db_id:
                raise IntegrityError(
                    f"{self.path}: the genesis at offset {frame.offset} belongs to another database", frame.offset
                )
            if entry.seq != index.head_seq + 1 + len(items) or entry.prev != (
                items[-1][0].hash if items else index.head_hash
            ):
                raise IntegrityError(
                    f"{self.path}: entry seq {entry.seq} at offset {frame.offset} does not link to the chain",
                    frame.offset,
                )
            acl_frame = acl_frame or entry.op in ACL_OPS
            tags: tuple[str, ...] = ()
            if slot.state == "bad" and not self._erasing(slot, journal, writer):
                raise IntegrityError(f"{self.path}: payload slot damaged at offset {slot.offset}", slot.offset)
            if entry.op == "put":
                if slot.state == "ok":
                    start = pos + (slot.offset - frame.offset) + SLOT_CRC.size
                    try:
                        tags = _tags_of(bytes(buf[start : start + slot.length - SLOT_CRC.size]))
                    except ChainError as exc:
                        raise IntegrityError(f"{self.path}: {exc} at offset {slot.offset}", slot.offset) from None
                else:
                    # erased, or (listed in the journal) part-way erased: its forget must follow
                    self._erased_live.add(entry.body["id"])
            items.append((entry, slot, entry_off, tags))
            entry_off += len(entry.raw)
        dropped: list[Rec] = []
        try:
            for entry, slot, e_off, tags in items:
                if entry.seq == 0:
                    index.acl.owner = entry.agent
                else:
                    dropped.extend(apply_entry(index, entry, slot.offset, slot.length, tags, e_off))
                if entry.op == "forget":
                    self._erased_live.difference_update(entry.body["ids"])
                index.head_seq, index.head_hash = entry.seq, entry.hash
                index.entries += 1
                self.head_ts = max(self.head_ts, entry.ts_ns)
        except (ChainError, KeyError, TypeError) as exc:
            raise IntegrityError(f"{self.path}: bad entry in frame at offset {frame.offset}: {exc}",
                                 frame.offset) from None
        if acl_frame:
            index.acl_frames.append(frame.offset)
        self._grow_tree([e.raw for e in frame.entries], frame.entries[0].seq)
        self.end = frame.end
        self.last_frame_offset = frame.offset
        return dropped

    def _apply_scanned(self, reader: FrameReader) -> bool:
        """Apply the frames of canonical puts from the reader's offset on that the scan core takes
        (mnemo/storage/file/scan.py), to the state `_apply_frame` would leave; False if it takes none,
        and the general path reads the next frame. Raises FrameError as the reader does."""
        buf, pos = reader.window()
        index = self.index
        res = scan_frames(buf, reader.base, pos, index.head_seq + 1, index.head_hash, -1, MAX_FRAME, LEAVES,
                          index.base.n + len(index.extra))
        if not res.ids:
            return False
        spans = res.frame_spans()
        ids = res.ids
        vers = array("I", res.columns["ver"])
        fresh = vers.count(1) == len(ids) and len(set(ids)) == len(ids) and (
            all(index.row_of(i) is None for i in ids) if index.base.n else index.rows.keys().isdisjoint(ids)
        )
        if fresh:
            index.extend_new(res)
            taken = len(spans)
        else:
            taken = self._put_scanned(res, spans, vers)
            if not taken:
                return False  # the general path reports the version that does not follow
        n = sum(k for _o, _e, k in spans[:taken])
        first = index.head_seq + 1
        index.head_seq = first + n - 1
        index.head_hash = res.hashes[(n - 1) * HASH_SIZE:n * HASH_SIZE]
        index.entries += n
        ts = array("q", res.columns["ts"][:8 * n])
        self.head_ts = max(self.head_ts, max(ts))
        assert self.tree is not None
        try:
            self.tree.add_leaves(res.leaves[:n * HASH_SIZE], first)
        except MnemoError as exc:  # as in _grow_tree
            raise IntegrityError(f"{self.path}: the Merkle tree does not follow the log: {exc}") from None
        self.last_frame_offset, self.end = spans[taken - 1][0], spans[taken - 1][1]
        reader.offset = self.end
        return True

    def _put_scanned(self, res: ScanResult, spans: list[tuple[int, int, int]], vers: array[int]) -> int:
        """Put the scanned entries one by one (records already in the index, or named twice), frame by
        frame up to the first whose version numbers do not follow; returns how many frames were put."""
        index = self.index
        c = {name: array(tc, res.columns[name]) for name, tc in COLUMNS.items() if name in res.columns}
        scopes, agents, tagsets = res.scopes, res.agents, res.tagsets
        sc, ag, tg = array("I", res.scope_codes), array("I", res.agent_codes), array("I", res.tagset_codes)
        k = 0
        for taken, (_off, _end, count) in enumerate(spans):
            seen: dict[str, int] = {}
            for i in range(k, k + count):
                rec_id = res.ids[i]
                expected = seen.get(rec_id) or index.next_ver(rec_id)
                if vers[i] != expected:
                    return taken
                seen[rec_id] = expected + 1
            for i in range(k, k + count):
                version = Version(
                    vers[i], c["seq"][i], c["ts"][i], agents[ag[i]], c["size"][i],
                    res.hashes[i * HASH_SIZE:(i + 1) * HASH_SIZE], c["slot_off"][i], c["slot_len"][i],
                    c["entry_off"][i], c["entry_len"][i],
                )
                index.put(res.ids[i], scopes[sc[i]], tagsets[tg[i]], version)
            k += count
        return len(spans)

    def _journal(self) -> set[tuple[int, int]] | None:
        """The exact payload slots (offset, length) the erasure journal names, if it belongs to this db.

        The journal never decides what is zeroed: erasure zeroes only slots of records that forgets in
        the chain name (see _redo_erasure). It only lets replay tell a slot that a crash left part-way
        zeroed from damage, and then only a slot it names exactly whose record a forget in the chain
        names (checked by _check_erased_live): a stray or forged journal changes nothing."""
        regions = snap.read_erase_journal(self.erase_path, self.db_id)
        return None if regions is None else set(regions)

    def _erasing(self, slot: Slot, journal: set[tuple[int, int]] | None, writer: bool) -> bool:
        """Whether a slot that fails its checksum is being (or was being) erased: the journal names it
        exactly, or, for a reader racing an erasure, the journal written since names it (the zeros are
        landing now) or the slot now reads as all zeros (the erasure has finished)."""
        region = (slot.offset, slot.length)
        if journal is not None and region in journal:
            return True
        if writer:
            return False
        if not any(read_exact(self.fd, slot.offset, slot.length)):
            return True
        return region in set(self._journal() or ())

    def _check_erased_live(self) -> None:
        live = [i for i in self._erased_live if self.index.has(i)]
        if live:
            rec = self.index.records[live[0]]
            off = rec.latest.slot_off
            raise IntegrityError(f"{self.path}: payload of live record {live[0]} is erased (offset {off})", off)
        self._erased_live.clear()

    def _reload(self, adopt: LogHandle | None = None) -> None:
        """The log file was replaced: follow it only if it provably continues this store's chain (same
        db_id, and it holds the head this store knew, with the same hash), reopening it and rebuilding
        the index from it. A compaction (ours, `adopt`ing the file it wrote, or another writer's) does
        that; an older copy of the file or another database put in its place is an IntegrityError, and
        the store stays on the file it had. Offsets change, so `generation` moves on and readers holding
        an old location retry."""
        with self._index_lock:
            if adopt is not None:
                handle = adopt
            else:
                handle = LogHandle(_open_regular(self.path, self.readonly))
                st = os.fstat(handle.fd)
                if (st.st_ino, st.st_dev) == self._identity:
                    os.close(handle.fd)  # another thread of this store reloaded first
                    return
            known = (self.index.head_seq, self.index.head_hash)
            saved = self._state()
            old = self._handle
            db_id = self.db_id
            self._handle = handle
            try:
                with gc_paused():
                    self._load(keep_tree=True)
                if self.db_id != db_id:
                    raise IntegrityError(
                        f"{self.path} was replaced by another database (db_id {self.db_id.hex()}, not "
                        f"{db_id.hex()})", 0
                    )
                self._unerased = []  # offsets into the old file; compaction left no forgotten payloads
                self._catch_up(writer=False)  # never let other threads see the index half rebuilt
                self._check_continues(known)
            except BaseException:
                self._restore(saved, old)
                if adopt is None:
                    os.close(handle.fd)
                raise
            self.generation += 1  # a reader that started before now retries after its read
            self._synced_end = self.end  # whoever compacted fsynced the new file before renaming it
            self._retire(old)
            old_tree = saved[-1]
            if old_tree is not None and old_tree is not self.tree:
                old_tree.close()

    def _check_continues(self, known: tuple[int, bytes]) -> None:
        seq, head = known
        if seq < 0:
            return  # nothing read yet (an open that met a compaction before its first catch-up)
        if self.index.head_seq < seq:
            raise IntegrityError(
                f"{self.path} was replaced by a file that ends at seq {self.index.head_seq}, before the head "
                f"this client had read (seq {seq}): an older copy, or a truncated log", None
            )
        if self.index.head_seq == seq:
            found: bytes | None = self.index.head_hash
        else:
            frame = frame_holding(self.fd, seq, HEADER_SIZE, self.end)
            found = None if frame is None else frame.entries[seq - frame.entries[0].seq].hash
        if found != head:
            raise IntegrityError(
                f"{self.path} was replaced by a file whose entry seq {seq} is not the one this client had read "
                "(another chain, or a rewritten log)", None
            )

    def _state(self) -> tuple[Any, ...]:
        return (self.index, self.end, self.last_frame_offset, self.head_ts, self.snapshot_used,
                self._dirty_snapshot, self._identity, self.db_id, self._unerased, self.tree)

    def _restore(self, saved: tuple[Any, ...], handle: LogHandle) -> None:
        (self.index, self.end, self.last_frame_offset, self.head_ts, self.snapshot_used,
         self._dirty_snapshot, self._identity, self.db_id, self._unerased, tree) = saved
        if self.tree is not None and self.tree is not tree:
            self.tree.close()  # the one opened for the file that was refused
        self.tree = tree
        self._handle = handle

    def _retire(self, handle: LogHandle) -> None:
        """Stop using a replaced log's descriptor: closed now if no thread reads through it, else by the
        last reader (see _release)."""
        with self._handle_lock:
            handle.retired = True
            if handle.users:
                self._retired.append(handle)
                return
        _close_handle(handle)

    def _acquire_handle(self) -> LogHandle:
        with self._handle_lock:
            handle = self._handle
            handle.users += 1
            return handle

    def _release(self, handle: LogHandle) -> None:
        with self._handle_lock:
            handle.users -= 1
            if not (handle.retired and handle.users == 0):
                return
            # Closed before it leaves the list and the waiters hear of it: a forget waiting in
            # _drain_retired must not return while the descriptor is still open.
            _close_handle(handle)
            if handle in self._retired:
                self._retired.remove(handle)
            self._handle_idle.notify_all()

    def _drain_retired(self) -> None:
        """Wait, lock_timeout at most, until no thread reads through a replaced log, so that every
        retired descriptor is closed (a forget must leave no copy of what it erased open in this
        process). ErasureIncomplete, naming the descriptor, if a read still holds one then."""
        deadline = time.monotonic() + self.lock_timeout
        with self._handle_lock:
            while self._retired:
                left = deadline - time.monotonic()
                if left <= 0:
                    held = self._retired[0]
                    raise ErasureIncomplete(
                        f"{self.path}: the forget is committed and its content erased from the log, but "
                        f"descriptor {held.fd} of this process (/proc/{os.getpid()}/fd/{held.fd}) still holds "
                        f"the log a compaction replaced, kept open by {held.users} read(s) in progress for over "
                        f"{self.lock_timeout} s; the erased bytes stay readable through it until they finish"
                    )
                self._handle_idle.wait(left)

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
        file, and moves on to wait for this one."""
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)  # private until its mode is set
        handle = LogHandle(fd)
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
            old = self._handle
            os.replace(tmp, self.path)
        except BaseException:
            os.close(fd)
            snap.remove(tmp)  # it holds every payload: never leave it behind, whatever stopped the copy
            raise
        # The new file is the log now, and its lock is this store's to let go (writing() does, however
        # what follows ends): else a failure below would leave the database locked until exit.
        self._unlock()
        self._locked = handle
        snap.remove(self.snap_path)
        self._reload(adopt=handle)
        self._catch_up(writer=True)
        fsync_dir(self.path)
        assert self._handle is handle and old is not handle

    def refresh(self) -> None:
        """Catch up with frames other processes appended. Cheap when nothing changed; never blocks."""
        self._check_open()
        if self.current_batch() is not None:
            return  # we hold the writer lock: nobody else appended
        self._catch_up(writer=False)

    # -- erasure -------------------------------------------------------------------------------------
    def _redo_erasure(self) -> None:
        """Finish any erasure a crash interrupted: slots of records that forgets read from the log since
        this store last held the lock dropped, where not yet zero. Only those: a journal on its own
        never makes anything be zeroed (see _journal)."""
        journal = self._journal()
        # A slot the journal names may read as zeros that never reached the disk: it is zeroed again,
        # and synced, like one that still holds bytes.
        regions = [
            (off, length) for off, length in self._unerased
            if (journal is not None and (off, length) in journal) or any(read_exact(self.fd, off, length))
        ]
        self._unerased = []
        if regions:
            self._erase(regions)
            self.recovery.append(f"completed an interrupted erasure of {len(regions)} payload slots")
        elif journal is not None:
            snap.remove(self.erase_path)

    def _erase(self, regions: list[tuple[int, int]]) -> None:
        """Overwrite payload slots with zeros, crash-safely: journal first, zeros, fsync, drop journal.
        Then nothing else of this database may keep the erased bytes: the snapshot (it holds tags) and
        every leftover temp file go, and every descriptor of a replaced log this process still holds
        is closed."""
        snap.remove(self.snap_path)  # it holds tags of the forgotten records
        self._remove_leftovers()
        snap.write_erase_journal(self.erase_path, self.db_id, regions)
        for off, length in _runs(regions):
            for start in range(off, off + length, ZEROS_PER_WRITE):
                write_all(self.fd, bytes(min(ZEROS_PER_WRITE, off + length - start)), start)
        sync(self.fd)
        snap.remove(self.erase_path)
        self._dirty_snapshot = True
        self._drain_retired()

    # -- writing -------------------------------------------------------------------------------------
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
            for (entry, _payload, tags), (slot_pos, slot_len) in zip(staged_list, slots, strict=True):
                dropped.extend(apply_entry(index, entry, offset + slot_pos, slot_len, tags, entry_pos))
                entry_pos += len(entry.raw) + ENTRY_HEADER.size
                acl_frame = acl_frame or entry.op in ACL_OPS
                index.head_seq, index.head_hash = entry.seq, entry.hash
                index.entries += 1
            if acl_frame:
                index.acl_frames.append(offset)
            self._grow_tree([s.entry.raw for s in staged_list], staged_list[0].entry.seq)
            self.head_ts = batch.head_ts
            end = offset + len(frame_bytes)
            if self._first_unsynced is None and not forgets:
                self._first_unsynced, self._foreign_after_unsynced = offset, False
            self.end = end
            self.last_frame_offset = offset
            self._dirty_snapshot = True
            if forgets:
                self._synced_end = max(self._synced_end, end)
                self._first_unsynced = None
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
        start = self._first_unsynced
        if self.durability != "fsync" or self.readonly or start is None or self._foreign_after_unsynced:
            return
        if not self._mutex.acquire(timeout=self.lock_timeout):
            return
        try:
            self._lock(time.monotonic() + self.lock_timeout)
            try:
                with self._index_lock:
                    if os.fstat(self.fd).st_size == self.end:
                        # Frames before the last good fsync's end were acknowledged: keep those.
                        os.ftruncate(self.fd, max(start, self._synced_end))
                        self._load()  # the index still shows the dropped writes: rebuild it
                        self._catch_up(writer=False)
                        self._first_unsynced = None
            finally:
                self._unlock()
        except (MnemoError, OSError):
            pass  # the client refuses writes anyway; a reopen sorts out what is on disk
        finally:
            self._mutex.release()

    def _sync_upto(self, end: int, generation: int | None = None) -> None:
        """Group commit: one fsync covers every frame written before it started. `end` is an offset in
        the log of `generation`: once a compaction has replaced that log, the new one (fsynced before
        its rename) holds everything, and offsets into the old one mean nothing."""
        gen = self.generation if generation is None else generation
        with self._sync_cond:
            while self._synced_end < end and self.generation == gen:
                if self._syncing:
                    # Wait for the fsync running now, even one that fails: a failed fsync is over only
                    # once it has dropped the frames it could not make durable, and no writer may
                    # hear of the failure (and, say, close the store) before that.
                    self._sync_cond.wait()
                    continue
                if self._failed is not None:
                    raise DurabilityError(f"fsync failed earlier: {self._failed}")
                self._syncing = True
                if self._writers and self.group_commit_wait:
                    self._wait_for_writers()
                target, target_gen, handle = self.end, self.generation, self._acquire_handle()
                self.fsyncs += 1
                self._sync_cond.release()
                try:
                    t0 = time.perf_counter()
                    sync(handle.fd)
                    # a moving average: what the leader's wait is measured against
                    self._fsync_seconds += (time.perf_counter() - t0 - self._fsync_seconds) / 8
                except DurabilityError as exc:
                    self._failed = exc
                    self._drop_unsynced()
                    raise
                finally:
                    self._release(handle)
                    self._sync_cond.acquire()
                    self._syncing = False
                    self._sync_cond.notify_all()
                if self.generation == target_gen:  # else a reload has set _synced_end for the new log
                    # Under the index lock, as _commit sets end and _first_unsynced: a frame being
                    # committed right now must not count as synced before its end does.
                    with self._index_lock:
                        self._synced_end = max(self._synced_end, target)
                        if self._synced_end >= self.end:
                            self._first_unsynced = None

    def _wait_for_writers(self) -> None:
        """Group commit: the leader, about to fsync, gives threads inside a write up to
        group_commit_wait seconds to finish it, so that its fsync covers their frames too (without the
        wait, a writer finishing just after the fsync started waits for the next one, and groups stay
        small). Never longer than half of what an fsync has been taking: on a fast disk a long wait
        would cost more than the fsyncs it saves. Called holding _sync_cond."""
        deadline = time.monotonic() + min(self.group_commit_wait, self._fsync_seconds / 2)
        while self._writers:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._writers_done.wait(left)

    def _enter_write(self) -> None:
        with self._sync_cond:
            self._writers += 1

    def _leave_write(self) -> None:
        with self._sync_cond:
            self._writers -= 1
            if not self._writers:
                self._writers_done.notify()

    def _batch_syncer(self) -> None:
        while not self._stop.wait(BATCH_INTERVAL):
            gen, end = self.generation, self.end
            if self._synced_end < end and self._failed is None:
                with contextlib.suppress(DurabilityError):
                    self._sync_upto(end, gen)

    # -- reading -------------------------------------------------------------------------------------
    def read_packed(
        self, version: Version, batch: Batch | None = None, rec_id: str = "", scope: str = ""
    ) -> bytes | memoryview:
        """The packed record fields of one version (its payload without the salt), checked against the
        chain: the entry it is served as must be the one the index names (same chain hash) and a put of
        this record, version and scope, and the payload must match the digest that entry commits to. So
        a payload rewritten in the file, even with its checksum recomputed, is never served. NotFound if
        its slot was erased meanwhile."""
        if version.slot_off < 0:
            if batch is None or version.seq not in batch.payloads:
                raise NotFound("staged version is not visible outside its transaction")
            return decode_put_payload(batch.payloads[version.seq])[1]
        e_off, e_len, offset, length = version.entry_off, version.entry_len, version.slot_off, version.slot_len
        handle = self._acquire_handle()
        try:
            if e_off + e_len == offset:  # one entry in its frame: the entry's bytes end where its slot starts
                data = _pread(handle.fd, e_len + length, e_off)
                raw, slot = data[:e_len], data[e_len:]
            else:
                slot = _pread(handle.fd, length, offset)
                raw = _pread(handle.fd, e_len, e_off) if e_off >= 0 else memoryview(b"")
        finally:
            self._release(handle)
        state = slot_state(slot) if len(slot) == length and length >= SLOT_CRC.size else "bad"
        if state == "erased":
            raise NotFound("the record was forgotten")
        if state != "ok":
            raise IntegrityError(f"{self.path}: payload slot damaged at offset {offset}", offset)
        payload = slot[SLOT_CRC.size :]
        why = served_put_problem(raw, version.hash, rec_id, version.ver, scope, payload)
        if why is not None:
            raise IntegrityError(f"{self.path}: the payload at offset {offset} is not served: {why}", offset)
        return payload[SALT_SIZE:]

    # -- the contract's reads ------------------------------------------------------------------------
    def head(self) -> tuple[int, bytes]:
        batch = self.current_batch()
        if batch is not None:
            return batch.head_seq, batch.head_hash
        with self._index_lock:
            return self.index.head_seq, self.index.head_hash

    def acl(self) -> Acl:
        batch = self.current_batch()
        return batch.acl if batch is not None else self.index.acl

    def get(self, rec_id: str, scopes: ScopeFilter, payloads: Payloads = "latest") -> Found | None:
        batch = self.current_batch()
        for _attempt in range(5):
            with self._index_lock:  # the index changes rows in place: never read one half-written
                rec = self._admitted(rec_id, scopes, batch)
                generation = self.generation
            if rec is None or payloads == "none":
                return None if rec is None else Found(rec)
            versions = rec.versions if payloads == "all" else (rec.latest,)
            try:
                quick = self._quick_packed([(rec, v) for v in versions])
                packed = tuple(
                    p if p is not None else self._packed(rec, v, batch) for v, p in zip(versions, quick, strict=True)
                )
            except (NotFound, IntegrityError):
                if self.generation == generation:
                    self.refresh()  # forgotten (erased) by another process meanwhile?
                    with self._index_lock:
                        now = self._admitted(rec_id, scopes, batch)
                    if self.generation == generation and now == rec:
                        raise
                continue
            if self.generation == generation:
                return Found(rec, packed)
            self.refresh()  # compacted meanwhile: the offsets read may be the old file's
        return None

    def _admitted(self, rec_id: str, scopes: ScopeFilter, batch: Batch | None) -> Rec | None:
        """The record if `scopes` admits it. A missing id and one not admitted take the same steps, so
        that timing does not tell them apart: one index lookup, one scope read from the index (for a
        missing id, that of a row the id's hash picks, then set aside), the filter asked about a scope
        (one no record has, for a missing id). Only an admitted record is built."""
        index = self.index
        row: int | None = None
        rec: Rec | None = None
        if batch is not None and rec_id in batch.recs:  # written (or forgotten) in this transaction
            rec = batch.recs[rec_id]
            scope = _NO_SCOPE if rec is None else rec.scope
        else:
            row = index.row_of(rec_id)
            live = len(index)
            probe = hash(rec_id) % live if live else 0
            scope = index.scope_at(probe if row is None else row) if live else _NO_SCOPE
            scope = _NO_SCOPE if row is None else scope
        if not scopes.admits(scope):
            return None
        return index.rec_at(row, rec_id) if row is not None else rec

    def select(self, query: Query, scopes: ScopeFilter, payloads: bool = True) -> list[Found]:
        batch = self.current_batch()
        with self._index_lock:
            base = self.index
            # The index's candidates match the tag filters exactly; scopes are decided once per
            # distinct scope, not per record. Only the records returned become Rec tuples.
            rows = base.candidate_rows(query.tags, query.any_tags, query.tag_prefix)
            hits: list[tuple[str, int | Rec]] = list(base.rows_in_scopes(rows, scopes.admits))
            if batch is not None and batch.recs:
                overlay = batch.recs
                hits = [hit for hit in hits if hit[0] not in overlay]
                hits.extend((r.id, r) for r in batch.matching(query, scopes.admits))
            hits.sort(key=lambda hit: hit[0])
            if query.limit is not None:
                del hits[query.limit :]
            recs = [base.rec_at(r, i) if isinstance(r, int) else r for i, r in hits]
        if not payloads:
            return [Found(rec) for rec in recs]
        out = []
        for rec, quick in zip(recs, self._quick_packed([(r, r.latest) for r in recs]), strict=True):
            if quick is not None:
                out.append(Found(rec, (quick,)))
                continue
            try:
                out.append(Found(rec, (self._packed(rec, rec.latest, batch),)))
            except (NotFound, IntegrityError):
                # Forgotten (being erased) by another process since the selection, or compacted away?
                self.refresh()
                found = self.get(rec.id, scopes)
                if found is not None:
                    out.append(found)
        return out

    def _quick_packed(self, items: list[tuple[Rec, Version]]) -> list[memoryview | None]:
        """The packed fields of each (record, version), read through one handle and checked as
        read_packed checks them (slot CRC, the entry's chain hash, that it is the put of this record,
        version and scope, the payload digest it commits to). None where a check fails, or for a
        version staged in a transaction: read_packed then reads it, or says what is wrong."""
        out: list[memoryview | None] = []
        minimum = SLOT_CRC.size + SALT_SIZE + 1
        crc_of, crc_at = zlib.crc32, SLOT_CRC.unpack_from
        handle = self._acquire_handle()
        try:
            fd = handle.fd
            for rec, v in items:
                e_off, e_len, offset, length = v.entry_off, v.entry_len, v.slot_off, v.slot_len
                if offset < 0 or e_off < 0 or length < minimum:
                    out.append(None)
                    continue
                if e_off + e_len == offset:  # one entry in its frame: entry and slot are adjacent
                    data = memoryview(os.pread(fd, e_len + length, e_off))
                    raw, slot = data[:e_len], data[e_len:]
                else:
                    slot, raw = memoryview(os.pread(fd, length, offset)), memoryview(os.pread(fd, e_len, e_off))
                if len(slot) != length or len(raw) != e_len:
                    out.append(None)
                    continue
                payload = slot[SLOT_CRC.size :]
                ok = crc_at(slot)[0] == crc_of(payload) and (
                    served_put_problem(raw, v.hash, rec.id, v.ver, rec.scope, payload) is None
                )
                out.append(payload[SALT_SIZE:] if ok else None)
        finally:
            self._release(handle)
        return out

    def _packed(self, rec: Rec, version: Version, batch: Batch | None) -> bytes | memoryview:
        return self.read_packed(version, batch, rec.id, rec.scope)

    def counts(self, scopes: ScopeFilter) -> tuple[int, int, int]:
        with self._index_lock:
            if scopes.everything and scopes.requested is None and self.current_batch() is None:
                return self.index.counts()  # a transaction's counts include its own writes: select()
        visible = [f.rec for f in self.select(Query(), scopes, payloads=False)]
        return len(visible), sum(len(r.versions) for r in visible), len({t for r in visible for t in r.tags})

    def usage(self, scope: str, tag: str) -> Usage:
        batch = self.current_batch()
        with self._index_lock:
            base = self.index
            recs = [base.rec_at(row, i) for i, row in base.rows_in_scopes(base.rows_with_tag(tag), scope.__eq__)]
            if batch is not None and batch.recs:
                overlay = batch.recs
                recs = [r for r in recs if r.id not in overlay]
                recs.extend(batch.matching(Query((tag,)), scope.__eq__))
        versions = [v for r in recs for v in r.versions]
        return Usage(len(recs), sum(r.latest.size for r in recs), len(versions), sum(v.size for v in versions))

    def log(self, since: int = 0, payloads: bool = False) -> Iterator[LogItem]:
        for item in read_log(self.path, payloads=payloads):
            if item.entry.seq >= since:
                yield LogItem(item.entry, item.slot.state, item.payload, item.offset)

    def verify(
        self, pubkey: bytes | None, expect_head: tuple[int, str] | None, progress: Progress | None = None
    ) -> VerifyReport:
        """The file checked end to end (audit.verify_db), then the index this store serves compared with
        what that pass over the file says it must hold."""
        self.refresh()
        report, expected = verify_db_and_index(self.path, pubkey=pubkey, expect_head=expect_head)
        if not report.ok:
            return report
        self.refresh()  # (others may have appended while the file was read)
        problems = [
            Problem("index", f"{msg}: the index snapshot was altered") for msg in self.index_differences(expected)
        ]
        if self.snapshot_refused is not None:
            problems.append(Problem(
                "snapshot", f"the index snapshot ends at this log's head but was refused ({self.snapshot_refused}): "
                "it was altered; this client replayed the log instead"
            ))
        if problems:
            return dataclasses.replace(report, ok=False, problems=report.problems + tuple(problems))
        return report

    def persist(self) -> None:
        self.save_snapshot()

    def info(self) -> dict[str, Any]:
        return {
            "log_bytes": self.end,
            "snapshot_used": self.snapshot_used,
            "open_seconds": self.open_seconds,
        }

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

    # -- snapshots, closing --------------------------------------------------------------------------
    def _write_snapshot(self) -> dict[str, Any] | None:
        """Write DB.snap; returns the index state written (None if none was)."""
        if self.readonly or self.last_frame_offset == 0:
            return None
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

    def index_differences(self, expected: ExpectedIndex | None = None) -> list[str]:
        """How the index this store serves differs from what the log says, one line per difference: a
        snapshot that was altered and re-sealed shows up here, since the log is the only truth.

        `expected` is what audit.verify_db_and_index gathered from the log in its one pass over it; it
        is compared with when it ends at the index's head. Otherwise (or without it) the log is
        replayed into a fresh index to compare with, unless others appended meanwhile."""
        if expected is not None:
            with self._index_lock:
                index = self.index
                if (index.head_seq, index.head_hash) == (expected.head_seq, expected.head_hash):
                    with gc_paused():
                        return _differences(index, expected) + index.posting_differences()
        fresh = FileStore(self.path, self.agent, readonly=True, use_snapshot=False)
        try:
            with self._index_lock:
                mine, theirs = self.index, fresh.index
                if fresh.end > self.end:
                    return []  # others appended meanwhile; compare again when quiet
                return mine.differences(theirs) + mine.posting_differences()
        finally:
            fresh.close()

    def save_snapshot(self) -> None:
        """Write the index snapshot now (under the writer lock, caught up, so it never resurrects
        what another process forgot)."""
        with self.writing():
            self._write_snapshot()

    def close(self) -> None:
        if self.closed:
            return
        self._stop.set()
        if self._batch_thread is not None:
            self._batch_thread.join()
        try:
            if self._failed is None and not self.readonly and self.durability != "none":
                with contextlib.suppress(DurabilityError):
                    self._sync_upto(self.end)
            if self._dirty_snapshot and self._failed is None and not self.readonly:
                with contextlib.suppress(MnemoError, OSError):
                    self.save_snapshot()
        finally:
            self.closed = True
            self._close_files()

    def _close_files(self) -> None:
        if self.tree is not None:
            self.tree.close()
            self.tree = None
        self._unlock()
        handles, self._retired = [self._handle, *self._retired], []
        self._handle = LogHandle(-1)
        for handle in handles:
            _close_handle(handle)


class _Writing:
    """FileStore.writing's context. A class rather than a generator: every write enters one, and a plain
    __enter__/__exit__ pair costs a fraction of contextlib's machinery."""

    __slots__ = ("store", "transactional", "batch", "counted")

    def __init__(self, store: FileStore, transactional: bool) -> None:
        self.store = store
        self.transactional = transactional
        self.batch: Batch | None = None  # None: nested in an open batch, which commits at its own end
        self.counted = False  # counted in store._writers (for the fsync leader's wait)

    def __enter__(self) -> Batch:
        store = self.store
        outer = store.current_batch()
        if outer is not None:
            return outer
        store.check_writable()
        if store.durability == "fsync":
            store._enter_write()
            self.counted = True
        try:
            return self._begin(store)
        except BaseException:
            self._leave()
            raise

    def _leave(self) -> None:
        if self.counted:
            self.counted = False
            self.store._leave_write()

    def _begin(self, store: FileStore) -> Batch:
        deadline = time.monotonic() + store.lock_timeout
        if not store._mutex.acquire(timeout=store.lock_timeout):
            raise LockTimeout(f"another thread held the writer lock for over {store.lock_timeout} s")
        try:
            store._lock(deadline)
            try:
                store._check_open()
                store._catch_up(writer=True)
                batch = Batch(store.index, (store.index.head_seq, store.index.head_hash, store.head_ts),
                              self.transactional)
            except BaseException:
                store._unlock()
                raise
        except BaseException:
            store._mutex.release()
            raise
        store._local.batch = self.batch = batch
        return batch

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        batch = self.batch
        if batch is None:
            return
        store = self.store
        store._local.batch = None
        end = generation = 0
        try:
            try:
                if exc_type is None and batch.staged:
                    end = store._commit(batch)
                    generation = store.generation
            finally:
                store._unlock()
        finally:
            store._mutex.release()
            self._leave()
        if end and store.durability == "fsync":
            store._sync_upto(end, generation)




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


def _differences(index: Index, expected: ExpectedIndex) -> list[str]:
    """How `index` differs from what the log says it must hold (FileStore.index_differences)."""
    out = [] if _same_records(index, expected) else _record_differences(index, expected)
    if index.acl.to_state() != expected.acl.to_state():
        out.append("the grants in the index differ from those in the log")
    if index.forgotten != expected.forgotten:
        out.append("the forgotten records in the index differ from those the log's forgets name")
    if index.entries != expected.entries:
        out.append(f"the index counts {index.entries} entries, the log holds {expected.entries}")
    return out


def _same_records(index: Index, expected: ExpectedIndex) -> bool:
    """Whether the index holds exactly the records the log says, compared in bulk, column by column,
    straight from the index's columns. False when they differ, or when the index does not hang
    together: _record_differences then looks record by record."""
    live = expected.live
    try:
        rows = list(index.live_rows())
        ids = [index.id_at(row) for row in rows]
        if len(ids) != len(live) or len(set(ids)) != len(ids):
            return False
        # the log's latest put of each record, in the index's row order (a KeyError if the index has a
        # record the log has not)
        puts = [live[rec_id] for rec_id in ids]  # type: ignore[index]
        cols = index.cols
        dense = len(rows) == len(cols["ver"])  # no forgotten rows: the columns are the live rows

        def column(name: str) -> array[int]:
            col = cols[name]
            return col if dense else array(col.typecode, map(col.__getitem__, rows))

        def logged(k: int) -> list[Any]:
            return [put[k] for put in puts]

        scopes, agents, tagsets = index.scopes.values, index.agents.values, index.tagsets.values
        h = HASH_SIZE
        hashes = bytes(index.hashes) if dense else b"".join(index.hashes[r * h : r * h + h] for r in rows)
        return bool(
            [scopes[c] for c in column("scope")] == logged(1)
            and [agents[c] for c in column("agent")] == logged(6)
            and [tagsets[c] for c in column("tagset")] == [tuple(t) for t in logged(2)]
            and all(
                column(name) == array(COLUMNS[name], logged(k))
                for name, k in (
                    ("ver", 3), ("seq", 4), ("ts", 5), ("size", 7), ("slot_off", 9), ("slot_len", 10),
                    ("entry_off", 11), ("entry_len", 12),
                )
            )
            and hashes == b"".join(logged(8))
            and {index.id_at(row): [tuple(v) for v in versions] for row, versions in index.older.items()}
            == {rec_id: [put[3:] for put in older] for rec_id, older in expected.older.items()}
        )
    except (KeyError, IndexError, TypeError, ValueError, OverflowError, IntegrityError):
        return False


def _record_differences(index: Index, expected: ExpectedIndex) -> list[str]:
    """Record by record, how the index's records differ from what the log says."""
    served: dict[str, Rec | None] = {}
    try:
        for row in index.live_rows():
            rec_id = index.id_at(row)
            if rec_id is None:
                continue
            try:
                served[rec_id] = index.rec_at(row)
            except IntegrityError:  # a record that does not hang together differs from anything
                served[rec_id] = None
    except IntegrityError as exc:
        return [f"the index does not hang together: {exc}"]
    live, older = expected.live, expected.older
    out = [
        f"record {rec_id} is only in {'the log' if rec_id in live else 'the index'}"
        for rec_id in sorted(served.keys() ^ live.keys())
    ]

    def from_log(rec_id: str) -> tuple[Any, ...]:  # compares equal to the Rec it must be
        latest = live[rec_id]
        versions = tuple(put[3:] for put in older.get(rec_id, ())) + (latest[3:],)
        return (rec_id, latest[1], tuple(latest[2]), versions)

    differ = [rec_id for rec_id in served.keys() & live.keys() if served[rec_id] != from_log(rec_id)]
    return out + [f"record {rec_id} differs between the index and the log" for rec_id in sorted(differ)]


def _tags_of(payload: bytes) -> tuple[str, ...]:
    try:
        _salt, packed = decode_put_payload(payload)
        return decode_record_fields(packed)[1]
    except Exception as exc:
        raise ChainError(f"unreadable put payload: {exc}") from None


def _saved_tree_size(body: dict[str, Any]) -> int | None:
    """The tree size a snapshot's compact range is of, or None if it holds none that is well-formed."""
    try:
        return CompactRange.from_bytes(body["tree"]).size
    except Exception:  # missing, or not a compact range: the snapshot cannot be continued from
        return None


def _stat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def _open_regular(path: str, readonly: bool) -> int:
    """Open the log, refusing anything but a regular file without ever blocking on one (a FIFO)."""
    fd = os.open(path, (os.O_RDONLY if readonly else os.O_RDWR) | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise MnemoError(f"cannot open the database at {path}: not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _close_handle(handle: LogHandle) -> None:
    if handle.fd >= 0:
        with contextlib.suppress(OSError):
            os.close(handle.fd)
        handle.fd = -1


def _creation_leftovers(path: str) -> list[str]:
    """Temp files of creations whose process is gone (they hold a genesis entry and nothing else); a
    running creator's file is left alone, whatever its state."""
    out = []
    for name in glob.glob(glob.escape(path) + ".new*"):
        pid = name[len(path) + 4 :].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            out.append(name)
        except OSError:
            pass  # alive, but not ours to signal
    return out


def _pread(fd: int, length: int, offset: int) -> memoryview:
    data = os.pread(fd, length, offset)
    if len(data) < length:  # a short read: at the end of the file, or interrupted
        data = read_exact(fd, offset, length)
    return memoryview(data)  # slices of a view copy nothing


class SnapshotRefused(ValueError):
    """A snapshot that belongs to the log (it ends at the log's frame with its head hash) but cannot be
    loaded as it stands: malformed, or forged. The log is replayed instead, and verify reports it."""


def load_snapshot(fd: int, db_id: bytes, body: dict[str, Any]) -> tuple[Index, int, int, int] | None:
    """(index, end offset, last frame offset, head ts) of a snapshot that belongs to the log open as
    `fd` and ends at one of its frames; None when it is stale (of another db, or not ending at a frame
    of this log with the head it names); SnapshotRefused when it ends there but cannot be loaded.

    The ACL is never taken from the snapshot: it is rebuilt from the genesis, grant and revoke entries
    of the log itself, at the frame offsets the snapshot lists (a listed offset that is not such a
    frame refuses the snapshot). What else it holds is trusted only as far as `verify` checks it
    against the log, and reads check each payload against its chain entry (FileStore.read_packed)."""
    try:
        if body["db_id"] != db_id:
            return None
        off, start = int(body["offset"]), int(body["frame_offset"])
        if not (HEADER_SIZE <= start < off <= os.fstat(fd).st_size):
            return None
        frame = parse_frame(read_exact(fd, start, off - start), 0, start)
        last = frame.entries[-1]
        state = body["index"]
        if not (frame.end == off and last.seq == state["head_seq"] and last.hash == state["head_hash"]):
            return None
    except (FrameError, KeyError, TypeError, ValueError, OverflowError):
        return None
    try:
        index = Index.from_state(db_id, state)
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
        total = frame_length(read_exact(fd, off, FRAME_HEADER.size), 0, off)
        if off + total > end:
            raise ChainError(f"the ACL frame at offset {off} runs past the snapshot's end")
        frame = parse_frame(read_exact(fd, off, total), 0, off)
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


__all__ = ["DURABILITY_MODES", "FileStore", "SnapshotRefused", "acl_from_frames", "load_snapshot"]
