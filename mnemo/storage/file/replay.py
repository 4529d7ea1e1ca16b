"""Catching up with the log: applying the frames appended since the store last looked to its index and
tree (a torn last write cut, damage refused, a part-way erasure told from damage), and following a log
that a compaction replaced, only where it continues this store's chain."""

from __future__ import annotations

import os
from array import array
from collections.abc import Callable
from typing import Any, TypeVar

from ...chain.codec import Entry, decode_put_payload, decode_record_fields
from ...chain.tree import HASH_SIZE
from ...errors import IntegrityError, MnemoError
from ..batch import ACL_OPS, ChainError, apply_entry
from ..gc_pause import gc_paused
from ..types import Rec, Version
from . import snapshot as snap
from .framing import ENTRY_HEADER, FRAME_HEADER, HEADER_SIZE, MAX_FRAME, SLOT_CRC, Frame, FrameError, Slot
from .handles import LogHandle, open_regular
from .index_columns import COLUMNS
from .logfile import (
    SCAN_CHUNK,
    FrameReader,
    after_damage,
    complete_with_damaged_length,
    frame_holding,
    pread,
    sync,
)
from .opening import file_state
from .scan import LEAVES, ScanResult, scan_frames
from .state import StoreState

T = TypeVar("T")


class Replay(StoreState):
    """FileStore's part that keeps its index and tree up with the log."""

    def refresh(self) -> None:
        """Catch up with frames other processes appended. Cheap when nothing changed; never blocks."""
        self._check_open()
        if self.current_batch() is not None:
            return  # we hold the writer lock: nobody else appended
        self._catch_up(writer=False)

    def read_fresh(self, read: Callable[[], T]) -> T:
        """refresh(), then `read()` (the contract's): catching up costs no round trip here."""
        self.refresh()
        return read()

    # -- catching up with the log --------------------------------------------------------------------
    def _catch_up(self, writer: bool, opening: bool = False) -> None:
        """Apply frames appended since self.end. A writer cuts a torn tail; damage raises."""
        with self._index_lock:
            if writer and not opening and self._locked_size is not None:
                # Taken with the writer lock, which is still held, on this very file (Opening._lock):
                # nobody appended since.
                (ino, dev), size = self._identity, self._locked_size
                self._locked_size = None
            else:
                ino, dev, size = file_state(self.path, self.fd)
            if ino >= 0 and (ino, dev) != self._identity:
                self._reload()
                size = os.fstat(self.fd).st_size
            if size < self.end:
                raise IntegrityError(f"{self.path}: log is shorter ({size}) than already read ({self.end})", size)
            if size == self.end:
                if opening or (writer and self._unerased):
                    self._redo_erasure()
                return
            journal = self._journal()
            self._part_erased.clear()
            if self._group.first_unsynced is not None:
                self._group.foreign_after_unsynced = True
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
            self._check_part_erased(writer)
            self._check_erased_live()
            if writer:
                self._redo_erasure()

    def _read_frames(self, size: int, journal: set[tuple[int, int]] | None, writer: bool) -> None:
        """Apply the frames from self.end up to `size`; FrameError at the first that cannot be read."""
        reader = FrameReader(self.fd, self.end, size, SCAN_CHUNK, reuse=True)  # (nothing here keeps a view)
        while reader.offset < size:
            if self.index.head_seq >= 0 and self._apply_scanned(reader):
                continue
            frame, buf, pos = reader.next()
            dropped = self._apply_frame(frame, buf, pos, journal, writer)
            part_erased = self._part_erased
            for rec in dropped:
                self._unerased.extend((v.slot_off, v.slot_len) for v in rec.versions if v.slot_len)
                for v in rec.versions:
                    if v.slot_off in part_erased:
                        part_erased[v.slot_off] = (v.slot_len, frame.offset)
            if any(e.op == "forget" for e in frame.entries):
                self._read_forget_at = frame.offset
                self._read_forget_slots = [(v.slot_off, v.slot_len) for rec in dropped for v in rec.versions
                                           if v.slot_len]
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
            if slot.state == "bad":
                self._bad_slot(slot, journal, writer)
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
        and the general path reads the next frame. Raises FrameError as the reader does.

        The leading frames whose puts are all new records go into the index in bulk (extend_new); the
        frames after the first that is not are put one by one."""
        buf, pos = reader.window()
        index = self.index
        res = scan_frames(buf, reader.base, pos, index.head_seq + 1, index.head_hash, -1, MAX_FRAME, LEAVES,
                          index.base.n + len(index.extra))
        if not res.entries:
            return False
        spans = res.frame_spans()
        vers = array("I", res.columns["ver"])
        bulk = self._fresh_frames(res, spans, vers)
        n = sum(k for _o, _e, k in spans[:bulk])
        if bulk:
            index.extend_new(res, n)
        taken = bulk
        if bulk < len(spans):
            taken += self._put_scanned(res, spans, vers, bulk, n)
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

    def _fresh_frames(self, res: ScanResult, spans: list[tuple[int, int, int]], vers: array[int]) -> int:
        """How many leading frames of the scan hold only new records: version 1, each id once, none in
        the index."""
        index = self.index
        n = res.entries
        fresh = vers.count(1)
        if fresh < n:
            fresh = next(i for i, v in enumerate(vers) if v != 1)
        w = res.id_width
        if w and index.appends_to_base(res.id_bytes[:w], w):
            fresh = min(fresh, res.id_run)  # ascending ids after every id in the index: distinct and new
        else:
            seen: set[str] = set()
            row_of = index.row_of
            for i, rec_id in enumerate(res.ids[:fresh]):
                if rec_id in seen or row_of(rec_id) is not None:
                    fresh = i
                    break
                seen.add(rec_id)
        frames, k = 0, 0
        for _off, _end, count in spans:
            if k + count > fresh:
                break
            k += count
            frames += 1
        return frames

    def _put_scanned(
        self, res: ScanResult, spans: list[tuple[int, int, int]], vers: array[int], skip: int, k: int
    ) -> int:
        """Put the scanned entries one by one (records already in the index, or named twice), frame by
        frame from frame `skip` (whose first entry is entry `k`) up to the first whose version numbers do
        not follow; returns how many frames were put."""
        index = self.index
        c = {name: array(tc, res.columns[name]) for name, tc in COLUMNS.items() if name in res.columns}
        scopes, agents, tagsets = res.scopes, res.agents, res.tagsets
        sc, ag, tg = array("I", res.scope_codes), array("I", res.agent_codes), array("I", res.tagset_codes)
        ids = res.ids
        for taken, (_off, _end, count) in enumerate(spans[skip:]):
            seen: dict[str, int] = {}
            for i in range(k, k + count):
                rec_id = ids[i]
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
                index.put(ids[i], scopes[sc[i]], tagsets[tg[i]], version)
            k += count
        return len(spans) - skip

    def _journal(self) -> set[tuple[int, int]] | None:
        """The exact payload slots (offset, length) the erasure journal names, if it belongs to this db.

        The journal never decides what is zeroed: erasure zeroes only slots of records that forgets in
        the chain name (see _redo_erasure). It only lets replay tell a slot that a crash left part-way
        zeroed from damage, and then only a slot it names exactly whose record a forget in the chain
        names (checked by _check_erased_live): a stray or forged journal changes nothing."""
        regions = snap.read_erase_journal(self.erase_path, self.db_id)
        return None if regions is None else set(regions)

    def _bad_slot(self, slot: Slot, journal: set[tuple[int, int]] | None, writer: bool) -> None:
        """A slot that fails its checksum may be being (or have been being) erased: a journal an earlier
        version wrote names it exactly, or, for a reader racing an erasure, it now reads as all zeros
        (the erasure has finished); else it is taken for now as a part-way erasure, which
        _check_part_erased confirms (the log's last frame forgets its version) or refuses as damage.
        Either way its record's forget must follow (_check_erased_live)."""
        if journal is not None and (slot.offset, slot.length) in journal:
            return
        if not writer and not any(pread(self.fd, slot.length, slot.offset)):
            return
        self._part_erased[slot.offset] = (slot.length, -1)

    def _check_part_erased(self, writer: bool) -> None:
        """The slots this catch-up read failing their checksum: each is a part-way erasure only if the
        forget that dropped its version is in the log's last frame (an erasure is fsynced before
        anything is appended after its forget), or, for a reader, if it now reads as all zeros (the
        erasure it raced has finished since). Anything else is damage."""
        part_erased, self._part_erased = self._part_erased, {}
        for off, (length, forgotten_at) in sorted(part_erased.items()):
            if forgotten_at >= 0 and forgotten_at == self.last_frame_offset:
                continue
            if not writer and not any(pread(self.fd, length, off)):
                continue
            raise IntegrityError(f"{self.path}: payload slot damaged at offset {off}", off)

    def _check_erased_live(self) -> None:
        live = [i for i in self._erased_live if self.index.has(i)]
        if live:
            rec = self.index.records[live[0]]
            off = rec.latest.slot_off
            raise IntegrityError(f"{self.path}: payload of live record {live[0]} is erased (offset {off})", off)
        self._erased_live.clear()

    def _grow_tree(self, entries: list[bytes], first_seq: int) -> None:
        assert self.tree is not None
        try:
            self.tree.add(entries, first_seq)
        except MnemoError as exc:  # StaleCache: the tree and the index disagree; only a bug gets here
            raise IntegrityError(f"{self.path}: the Merkle tree does not follow the log: {exc}") from None

    def _reload(self, adopt: LogHandle | None = None) -> None:
        """The log file was replaced: follow it only if it provably continues this store's chain (same
        db_id, and it holds the head this store knew, with the same hash), reopening it and rebuilding
        the index from it. A compaction (ours, `adopt`ing the file it wrote, or another writer's) does
        that; an older copy of the file or another database put in its place is an IntegrityError, and
        the store stays on the file it had. Offsets change: log handle and index are swapped together
        under the index lock, so a read, which takes the handle with the records it reads (reads.py),
        reads old offsets through the old log, open until it lets go (handles.py). `generation` moves on
        for the fsync leader (group_commit.py)."""
        with self._index_lock:
            if adopt is not None:
                handle = adopt
            else:
                handle = LogHandle(open_regular(self.path, self.readonly))
                st = os.fstat(handle.fd)
                if (st.st_ino, st.st_dev) == self._identity:
                    os.close(handle.fd)  # another thread of this store reloaded first
                    return
            known = (self.index.head_seq, self.index.head_hash)
            saved = self._state()
            old = self._handles.current
            db_id = self.db_id
            self._handles.current = handle
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
            self.generation += 1  # offsets into the old log (an fsync's end) mean nothing now
            self._group.synced_end = self.end  # whoever compacted fsynced the new file before renaming it
            self._handles.retire(old)
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
        self._handles.current = handle


def _tags_of(payload: bytes) -> tuple[str, ...]:
    try:
        _salt, packed = decode_put_payload(payload)
        return decode_record_fields(packed)[1]
    except Exception as exc:
        raise ChainError(f"unreadable put payload: {exc}") from None
