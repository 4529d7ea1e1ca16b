"""The store: one log file, its indexes, the single-writer commit path, recovery and erasure.

This is the storage contract the client builds on (a later server backend implements the same few
methods): `writing()` yields a Batch to stage entries in, committed as one frame; `refresh()` catches up
with frames other processes appended; `read_packed()` reads one payload slot from disk.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from array import array
from typing import TYPE_CHECKING, Any, NamedTuple

from ..acl import Acl
from ..errors import Closed, DurabilityError, IntegrityError, LockTimeout, MnemoError, NotFound, ReadOnly
from . import snapshot as snap
from .codec import SALT_SIZE, ZERO_HASH, Entry, decode_put_payload, decode_record_fields, make_entry
from .framing import (
    HEADER_SIZE,
    SLOT_CRC,
    Frame,
    FrameError,
    HeaderError,
    Slot,
    decode_file_header,
    encode_file_header,
    encode_frame,
    encode_frame_slots,
    parse_frame,
    slot_state,
)
from .gc_pause import gc_paused
from .index import COLUMNS, HASH_SIZE, Index, Rec, Version
from .logfile import FileLock, find_next_frame, fsync_dir, iter_frames, read_exact, sync, write_all

if TYPE_CHECKING:
    from ..audit import ExpectedIndex

DURABILITY_MODES = ("fsync", "batch", "none")
BATCH_INTERVAL = 0.05
REBASE_ROWS = 10_000


class ChainError(ValueError):
    """An entry that is well-framed but does not follow from the chain before it."""


class Staged(NamedTuple):
    entry: Entry
    payload: bytes | None
    tags: tuple[str, ...]


class Batch:
    """The entries of one commit, staged under the writer lock, plus an overlay of the records and ACL
    they change so that reads inside a transaction see its own writes."""

    def __init__(self, store: Store, transactional: bool = False) -> None:
        self.store = store
        # Outside a transaction an operation does all its reads before it stages its one entry, so
        # the overlay would never be read: skip building it.
        self.transactional = transactional
        self.base: Index = store.index
        self.staged: list[Staged] = []
        self.recs: dict[str, Rec | None] = {}
        self._acl: Acl | None = None
        self.head_seq: int = self.base.head_seq
        self.head_hash: bytes = self.base.head_hash
        self.head_ts: int = store.head_ts
        self.payloads: dict[int, bytes] = {}
        self._looked_up: tuple[str, Rec | None] | None = None

    # the view interface apply_entry works on (Index has the same methods)
    def get_rec(self, rec_id: str) -> Rec | None:
        if rec_id in self.recs:
            return self.recs[rec_id]
        return self.base.get_rec(rec_id)

    def next_ver(self, rec_id: str) -> int:
        prev = self.get_rec(rec_id)
        self._looked_up = (rec_id, prev)  # apply_entry puts right after: spare it a second lookup
        return 1 if prev is None else prev.latest.ver + 1

    def put(self, rec_id: str, scope: str, tags: tuple[str, ...], version: Version) -> None:
        looked_up, self._looked_up = self._looked_up, None
        prev = looked_up[1] if looked_up is not None and looked_up[0] == rec_id else self.get_rec(rec_id)
        versions = (version,) if prev is None else prev.versions + (version,)
        self.recs[rec_id] = Rec(rec_id, scope, tags, versions)

    def drop(self, rec_id: str) -> Rec | None:
        rec = self.get_rec(rec_id)
        self.recs[rec_id] = None
        return rec

    @property
    def acl(self) -> Acl:
        return self._acl if self._acl is not None else self.base.acl

    def acl_for_write(self) -> Acl:
        if self._acl is None:
            self._acl = self.base.acl.copy()
        return self._acl

    def stage(
        self, op: str, agent: str, body: dict[str, Any], payload: bytes | None = None,
        tags: tuple[str, ...] = (), trusted: bool = False,
    ) -> Entry:
        """Append one entry to the batch (seq, prev and time assigned now) and apply it to the overlay.
        `trusted`: the body's maps are already in sorted key order, so canonicalising can be skipped."""
        ts = max(time.time_ns(), self.head_ts)
        entry = make_entry(self.head_seq + 1, ts, self.head_hash, op, agent, body, trusted)
        if self.transactional:
            apply_entry(self, entry, -1, 0 if payload is None else len(payload) + SLOT_CRC.size, tags)
            if payload is not None:  # what reads of the overlay's staged versions return
                self.payloads[entry.seq] = payload
        self.staged.append(Staged(entry, payload, tags))
        self.head_seq, self.head_hash, self.head_ts = entry.seq, entry.hash, ts
        return entry


def apply_entry(
    view: Any, entry: Entry, slot_off: int, slot_len: int, tags: tuple[str, ...]
) -> list[Rec]:
    """Apply one entry to an Index or a Batch; returns the records a forget dropped."""
    body = entry.body
    op = entry.op
    if op == "put":
        rec_id = body["id"]
        expected = view.next_ver(rec_id)
        if body["ver"] != expected:
            raise ChainError(f"put of {rec_id} version {body['ver']}, expected {expected}")
        version = Version(
            body["ver"], entry.seq, entry.ts_ns, entry.agent, body["size"], entry.hash, slot_off, slot_len
        )
        view.put(rec_id, body["scope"], tags, version)
        return []
    if op == "forget":
        dropped = []
        for rec_id in body["ids"]:
            rec = view.drop(rec_id)
            if rec is not None:
                dropped.append(rec)
        return dropped
    if op == "grant":
        view.acl_for_write().grant(body["principal"], body["scope"], body["perms"])
    elif op == "revoke":
        view.acl_for_write().revoke(body["principal"], body["scope"], body["perms"])
    elif op == "genesis":
        raise ChainError("genesis entry after seq 0")
    return []


class Store:
    def __init__(
        self, path: str, agent: str, *, readonly: bool = False, durability: str = "fsync",
        lock_timeout: float = 10.0, create: bool = True, use_snapshot: bool = True,
    ) -> None:
        if durability not in DURABILITY_MODES:
            raise ValueError(f"durability must be one of {DURABILITY_MODES}, got {durability!r}")
        self.path = path
        self.agent = agent
        self.readonly = readonly
        self.durability = durability
        self.lock_timeout = lock_timeout
        self.recovery: list[str] = []
        self.use_snapshot = use_snapshot
        self.snapshot_used = False
        self.closed = False
        self._failed: BaseException | None = None
        self._mutex = threading.RLock()  # one writer thread at a time, held through a transaction
        self._index_lock = threading.RLock()  # short critical sections: index reads and updates
        self._local = threading.local()
        self._sync_cond = threading.Condition()
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
        self.lock = None
        self.fd = -1
        self._retired_fds: list[int] = []
        self.generation = 0
        self.index = Index()  # until _load reads the real one
        self.head_ts = 0
        try:
            t0 = time.perf_counter()
            self.lock = None if readonly else FileLock(path + ".lock")
            with gc_paused():
                self._open(create)
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

    def _open(self, create: bool) -> None:
        if not os.path.exists(self.path) or os.path.getsize(self.path) == 0:
            if self.readonly or not create:
                raise NotFound(f"no Mnemo database at {self.path}")
            self._create()
        self.fd = os.open(self.path, os.O_RDONLY if self.readonly else os.O_RDWR)
        self._load()
        self._open_catch_up()
        if self.index.head_seq < 0:
            raise IntegrityError(f"{self.path}: the log holds no genesis entry", HEADER_SIZE)
        self._synced_end = self.end

    def _open_catch_up(self) -> None:
        if self.lock is not None:
            self.lock.acquire(self.lock_timeout)
            try:
                # Leftovers of a crash: a compaction (the old log stands) and temp files that may hold tags.
                for leftover in (".compact", ".snap.tmp", ".erase.tmp"):
                    snap.remove(self.path + leftover)
                self._catch_up(writer=True, opening=True)
                if self._dirty_snapshot:
                    state = self._write_snapshot()
                    if state is not None and len(self.index.extra) >= REBASE_ROWS:
                        # Rows replayed from the log each hold a dict entry and an id string; loaded
                        # from the snapshot's form they share one sorted blob, half the memory.
                        self.index = Index.from_state(self.db_id, state)
            finally:
                self.lock.release()
        else:
            self._catch_up(writer=False)

    def _create(self) -> None:
        """Write header and genesis to a temp file, fsync it, and rename it into place: creation is atomic."""
        assert self.lock is not None
        self.lock.acquire(self.lock_timeout)
        try:
            if os.path.exists(self.path) and os.path.getsize(self.path) > 0:
                return
            db_id = os.urandom(16)
            genesis = make_entry(0, time.time_ns(), ZERO_HASH, "genesis", self.agent,
                                 {"db_id": db_id, "format": 1})
            data = encode_file_header(db_id) + encode_frame([(genesis.raw, None)])
            tmp = f"{self.path}.new{os.getpid()}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                write_all(fd, data, 0)
                sync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)  # we hold the lock, and the path is empty or missing
            fsync_dir(self.path)
        finally:
            self.lock.release()

    def _load(self) -> None:
        """Read the header, then take the index from a valid snapshot or start from an empty one."""
        try:
            self.db_id = decode_file_header(read_exact(self.fd, 0, HEADER_SIZE))
        except HeaderError as exc:
            raise IntegrityError(f"{self.path}: {exc}", 0) from None
        self.index = Index(self.db_id)
        self.end = HEADER_SIZE
        self.last_frame_offset = 0
        self.head_ts = 0
        self.snapshot_used = False
        body = snap.read_snapshot(self.snap_path) if self.use_snapshot else None
        if body is not None and self._snapshot_matches(body):
            try:
                self.index = Index.from_state(self.db_id, body["index"])
                self.end = int(body["offset"])
                self.last_frame_offset = int(body["frame_offset"])
                self.head_ts = int(body["head_ts"])
                self.snapshot_used = True
            except Exception:  # sealed but malformed: only the log can be trusted
                self.index = Index(self.db_id)
                self.end, self.last_frame_offset, self.head_ts = HEADER_SIZE, 0, 0
        if not self.snapshot_used:
            # Missing, stale or damaged: the log is the truth. The next close writes a fresh snapshot.
            self._dirty_snapshot = True
        self._inode = os.fstat(self.fd).st_ino

    def _snapshot_matches(self, body: dict[str, Any]) -> bool:
        try:
            if body["db_id"] != self.db_id:
                return False
            off, start = body["offset"], body["frame_offset"]
            if not (HEADER_SIZE <= start < off <= os.fstat(self.fd).st_size):
                return False
            frame = parse_frame(read_exact(self.fd, start, off - start), 0, start)
            last = frame.entries[-1]
            state = body["index"]
            return bool(frame.end == off and last.seq == state["head_seq"] and last.hash == state["head_hash"])
        except (FrameError, KeyError, TypeError):
            return False

    # -- catching up with the log --------------------------------------------------------------------
    def _catch_up(self, writer: bool, opening: bool = False) -> None:
        """Apply frames appended since self.end. A writer cuts a torn tail; damage raises."""
        with self._index_lock:
            if os.stat(self.path).st_ino != self._inode:
                self._reload()
            size = os.fstat(self.fd).st_size
            if size < self.end:
                raise IntegrityError(f"{self.path}: log is shorter ({size}) than already read ({self.end})", size)
            if size == self.end:
                if opening or (writer and self._unerased):
                    self._redo_erasure()
                return
            journal = self._journal() if writer else None
            to_check = self._unerased
            try:
                if self._first_unsynced is not None:
                    self._foreign_after_unsynced = True
                for frame, buf, pos in iter_frames(self.fd, self.end, size):
                    dropped = self._apply_frame(frame, buf, pos, frame.end == size, journal)
                    for rec in dropped:
                        to_check.extend((v.slot_off, v.slot_len) for v in rec.versions if v.slot_len)
                    if dropped and self.snapshot_used:
                        self._dirty_snapshot = True  # it may hold tags of what was forgotten
            except FrameError as exc:
                self._torn_or_damaged(exc, size, writer)
            self._check_erased_live()
            if writer:
                self._redo_erasure()

    def _torn_or_damaged(self, exc: FrameError, size: int, writer: bool) -> None:
        """A frame that cannot be read: a torn last write (cut it) or damage (raise, change nothing)."""
        if exc.offset == HEADER_SIZE:
            # Creation is atomic (write, fsync, rename), so a bad genesis frame is damage, never a tear.
            raise IntegrityError(
                f"{self.path}: the genesis frame at offset {exc.offset} is damaged ({exc})", exc.offset
            )
        # Valid frames that continue the chain after it mean damage. Seqs at or below the head are
        # frames inside the torn frame's own content (a record may hold a copy of a Mnemo log).
        if find_next_frame(self.fd, exc.offset, size, min_seq=self.index.head_seq + 1) is not None:
            raise IntegrityError(
                f"{self.path}: damaged frame at offset {exc.offset} ({exc}); valid frames follow it", exc.offset
            )
        if any(self.index.has(i) for i in self._erased_live):
            # Payloads are zeroed only once their forget is durable, so that forget was no torn write.
            raise IntegrityError(
                f"{self.path}: damaged frame at offset {exc.offset} ({exc}); it held a durable forget", exc.offset
            )
        if not writer:
            return  # perhaps a write in progress: stop before it
        cut = size - exc.offset
        os.ftruncate(self.fd, exc.offset)
        sync(self.fd)
        self.recovery.append(f"cut a torn last frame at offset {exc.offset} ({cut} bytes): {exc}")

    def _apply_frame(
        self, frame: Frame, buf: memoryview, pos: int, is_last: bool, journal: list[tuple[int, int]] | None
    ) -> list[Rec]:
        index = self.index
        items: list[tuple[Entry, int, int, tuple[str, ...]]] = []
        for entry, slot in zip(frame.entries, frame.slots, strict=True):
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
            tags: tuple[str, ...] = ()
            if slot.state == "bad" and not _in_regions(slot.offset, journal) and not self._erasing(slot):
                if is_last:
                    raise FrameError("bad", f"payload slot checksum mismatch at offset {slot.offset}",
                                     frame.offset, frame.length)
                raise IntegrityError(f"{self.path}: payload slot damaged at offset {slot.offset}", slot.offset)
            if entry.op == "put":
                if slot.state == "ok":
                    start = pos + (slot.offset - frame.offset) + SLOT_CRC.size
                    try:
                        tags = _tags_of(bytes(buf[start : start + slot.length - SLOT_CRC.size]))
                    except ChainError as exc:
                        raise IntegrityError(f"{self.path}: {exc} at offset {slot.offset}", slot.offset) from None
                else:
                    self._erased_live.add(entry.body["id"])
            items.append((entry, slot.offset, slot.length, tags))
        dropped: list[Rec] = []
        try:
            for entry, slot_off, slot_len, tags in items:
                if entry.seq == 0:
                    index.acl.owner = entry.agent
                else:
                    dropped.extend(apply_entry(index, entry, slot_off, slot_len, tags))
                if entry.op == "forget":
                    self._erased_live.difference_update(entry.body["ids"])
                index.head_seq, index.head_hash = entry.seq, entry.hash
                index.entries += 1
                self.head_ts = max(self.head_ts, entry.ts_ns)
        except (ChainError, KeyError, TypeError) as exc:
            raise IntegrityError(f"{self.path}: bad entry in frame at offset {frame.offset}: {exc}",
                                 frame.offset) from None
        self.end = frame.end
        self.last_frame_offset = frame.offset
        return dropped

    def _journal(self) -> list[tuple[int, int]] | None:
        """The erasure journal's regions, if it belongs to this db; regions outside the log's frames or
        over a live record's payload are dropped, so a stray or forged journal cannot zero real data."""
        regions = snap.read_erase_journal(self.erase_path, self.db_id)
        if not regions:
            return regions
        live = self.index.live_slot_offsets()
        size = os.fstat(self.fd).st_size
        return [(o, n) for o, n in regions if o > HEADER_SIZE and o + n <= size and o not in live]

    def _erasing(self, slot: Slot) -> bool:
        """A reader may meet a slot another process is zeroing right now: the journal lists it, or, if
        the erasure has just finished, the slot now reads as all zeros."""
        if _in_regions(slot.offset, self._journal()):
            return True
        return not any(read_exact(self.fd, slot.offset, slot.length))

    def _check_erased_live(self) -> None:
        live = [i for i in self._erased_live if self.index.has(i)]
        if live:
            rec = self.index.records[live[0]]
            off = rec.latest.slot_off
            raise IntegrityError(f"{self.path}: payload of live record {live[0]} is erased (offset {off})", off)
        self._erased_live.clear()

    def _reload(self) -> None:
        """The log file was replaced (compaction): reopen it and rebuild the index from it. Offsets
        change, so `generation` moves on and readers holding an old location retry."""
        with self._index_lock:
            fd = os.open(self.path, os.O_RDONLY if self.readonly else os.O_RDWR)
            if os.fstat(fd).st_ino == os.fstat(self.fd).st_ino:
                os.close(fd)  # another thread of this client reloaded first
                return
            # Other threads may be reading (or the batch syncer syncing) through the old descriptor
            # right now: keep it open until close, so they finish on the old file instead of failing
            # with EBADF or, worse, reading through a reused descriptor number.
            self.generation += 1  # first: a reader that started before now retries after its read
            self._retired_fds.append(self.fd)
            self.fd = fd
            with gc_paused():
                self._load()
            self._unerased = []  # offsets into the old file; compaction left no forgotten payloads
            self._catch_up(writer=False)  # never let other threads see the index half rebuilt
            self._synced_end = self.end  # whoever compacted fsynced the new file before renaming it

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
        """Copy the log to `tmp` without erased slots, fsync it, rename it over the log, and reload."""
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
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
            sync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        snap.remove(self.snap_path)
        self._reload()
        self._catch_up(writer=True)
        fsync_dir(self.path)

    def refresh(self) -> None:
        """Catch up with frames other processes appended. Cheap when nothing changed; never blocks."""
        self._check_open()
        if self.current_batch() is not None:
            return  # we hold the writer lock: nobody else appended
        self._catch_up(writer=False)

    # -- erasure -------------------------------------------------------------------------------------
    def _redo_erasure(self) -> None:
        """Finish any erasure a crash interrupted: the journal's regions, and slots of records that
        forgets read from the log since we last held the lock dropped, where not yet zero."""
        journal = self._journal()
        regions = list(journal or [])
        for off, length in self._unerased:
            if any(read_exact(self.fd, off, length)):
                regions.append((off, length))
        self._unerased = []
        if regions:
            self._erase(regions)
            self.recovery.append(f"completed an interrupted erasure of {len(regions)} payload slots")
        elif journal is not None:
            snap.remove(self.erase_path)

    def _erase(self, regions: list[tuple[int, int]]) -> None:
        """Overwrite payload slots with zeros, crash-safely: journal first, zeros, fsync, drop journal."""
        snap.remove(self.snap_path)  # it holds tags of the forgotten records
        snap.remove(self.snap_path + ".tmp")
        snap.write_erase_journal(self.erase_path, self.db_id, regions)
        for off, length in regions:
            write_all(self.fd, bytes(length), off)
        sync(self.fd)
        snap.remove(self.erase_path)
        self._dirty_snapshot = True

    # -- writing -------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise Closed("the client is closed")

    def check_writable(self) -> None:
        self._check_open()
        if self.readonly:
            raise ReadOnly("the client was opened with readonly=True")
        if self._failed is not None:
            raise DurabilityError(f"an earlier write failed ({self._failed}); reopen the database")

    def current_batch(self) -> Batch | None:
        batch: Batch | None = getattr(self._local, "batch", None)
        return batch

    def writing(self, transactional: bool = False) -> _Writing:
        """A context that holds the writer lock, caught up with the log, and commits what its body
        stages as one frame (nothing, if the body raises). Inside this thread's open batch it yields
        that batch and commits nothing. `transactional`: the body reads its own staged writes (see Batch)."""
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
            for (entry, _payload, tags), (slot_pos, slot_len) in zip(staged_list, slots, strict=True):
                dropped.extend(apply_entry(index, entry, offset + slot_pos, slot_len, tags))
                index.head_seq, index.head_hash = entry.seq, entry.hash
                index.entries += 1
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
        if self.durability != "fsync" or self.lock is None or start is None or self._foreign_after_unsynced:
            return
        if not self._mutex.acquire(timeout=self.lock_timeout):
            return
        try:
            self.lock.acquire(self.lock_timeout)
            try:
                with self._index_lock:
                    if os.fstat(self.fd).st_size == self.end:
                        # Frames before the last good fsync's end were acknowledged: keep those.
                        os.ftruncate(self.fd, max(start, self._synced_end))
                        self._load()  # the index still shows the dropped writes: rebuild it
                        self._catch_up(writer=False)
                        self._first_unsynced = None
            finally:
                self.lock.release()
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
                target, target_gen, fd = self.end, self.generation, self.fd
                self._sync_cond.release()
                try:
                    sync(fd)
                except DurabilityError as exc:
                    self._failed = exc
                    self._drop_unsynced()
                    raise
                finally:
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

    def _batch_syncer(self) -> None:
        while not self._stop.wait(BATCH_INTERVAL):
            gen, end = self.generation, self.end
            if self._synced_end < end and self._failed is None:
                with contextlib.suppress(DurabilityError):
                    self._sync_upto(end, gen)

    # -- reading -------------------------------------------------------------------------------------
    def read_packed(self, version: Version, batch: Batch | None = None) -> bytes | memoryview:
        """The packed record fields of one version (its payload without the salt). NotFound if its
        slot was erased meanwhile."""
        if version.slot_off < 0:
            if batch is None or version.seq not in batch.payloads:
                raise NotFound("staged version is not visible outside its transaction")
            return decode_put_payload(batch.payloads[version.seq])[1]
        offset, length = version.slot_off, version.slot_len
        data = os.pread(self.fd, length, offset)
        if len(data) < length:  # a short read: at the end of the file, or interrupted
            data = read_exact(self.fd, offset, length)
        view = memoryview(data)  # slices of a view copy nothing
        state = slot_state(view) if len(data) == length and length >= SLOT_CRC.size else "bad"
        if state == "erased":
            raise NotFound("the record was forgotten")
        if state != "ok":
            raise IntegrityError(f"{self.path}: payload slot damaged at offset {offset}", offset)
        if len(view) < SLOT_CRC.size + SALT_SIZE + 1:
            raise IntegrityError(f"{self.path}: unreadable payload at offset {offset}: too short", offset)
        return view[SLOT_CRC.size + SALT_SIZE :]

    # -- snapshots, closing --------------------------------------------------------------------------
    def _write_snapshot(self) -> dict[str, Any] | None:
        """Write DB.snap; returns the index state written (None if none was)."""
        if self.readonly or self.last_frame_offset == 0:
            return None
        state = self.index.to_state()
        body = {
            "db_id": self.db_id,
            "offset": self.end,
            "frame_offset": self.last_frame_offset,
            "head_ts": self.head_ts,
            "index": state,
        }
        try:
            snap.write_snapshot(self.snap_path, body)
            self._dirty_snapshot = False
        except OSError:
            return None  # a snapshot only speeds up the next open
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
        fresh = Store(self.path, self.agent, readonly=True, use_snapshot=False)
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
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        for fd in self._retired_fds:
            os.close(fd)
        self._retired_fds = []
        if self.lock is not None:
            self.lock.close()
            self.lock = None


class _Writing:
    """Store.writing's context. A class rather than a generator: every write enters one, and a plain
    __enter__/__exit__ pair costs a fraction of contextlib's machinery."""

    __slots__ = ("store", "transactional", "batch", "lock")

    def __init__(self, store: Store, transactional: bool) -> None:
        self.store = store
        self.transactional = transactional
        self.batch: Batch | None = None  # None: nested in an open batch, which commits at its own end

    def __enter__(self) -> Batch:
        store = self.store
        outer = store.current_batch()
        if outer is not None:
            return outer
        store.check_writable()
        lock = store.lock
        assert lock is not None
        if not store._mutex.acquire(timeout=store.lock_timeout):
            raise LockTimeout(f"another thread held the writer lock for over {store.lock_timeout} s")
        try:
            lock.acquire(store.lock_timeout)
            try:
                store._check_open()
                store._catch_up(writer=True)
                batch = Batch(store, self.transactional)
            except BaseException:
                lock.release()
                raise
        except BaseException:
            store._mutex.release()
            raise
        self.lock = lock
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
                self.lock.release()
        finally:
            store._mutex.release()
        if end and store.durability == "fsync":
            store._sync_upto(end, generation)




def _differences(index: Index, expected: ExpectedIndex) -> list[str]:
    """How `index` differs from what the log says it must hold (Store.index_differences)."""
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
                for name, k in (("ver", 3), ("seq", 4), ("ts", 5), ("size", 7), ("slot_off", 9), ("slot_len", 10))
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


def _in_regions(offset: int, regions: list[tuple[int, int]] | None) -> bool:
    return bool(regions) and any(o == offset for o, _n in regions or ())


def _tags_of(payload: bytes) -> tuple[str, ...]:
    try:
        _salt, packed = decode_put_payload(payload)
        return decode_record_fields(packed)[1]
    except Exception as exc:
        raise ChainError(f"unreadable put payload: {exc}") from None


__all__ = ["DURABILITY_MODES", "Batch", "Store"]
