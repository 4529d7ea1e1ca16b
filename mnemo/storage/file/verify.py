"""The file backend's check of its log (docs/FORMAT.md §5.1), as `mnemo verify` and `FileStore.verify`
make it: the file read in chunks, without opening it as a client and without writing; its header,
framing, frame and slot checksums, the erasure journal and leftover files checked here, and every entry
through the chain rules (mnemo.chain.rules.ChainVerifier). A fast path takes runs of frames of
canonical puts through the scan core (scan.py). The index snapshot beside the log is check.py's."""

from __future__ import annotations

import contextlib
import os
import stat
from array import array
from dataclasses import dataclass, field

from ...acl import Acl
from ...chain.codec import ZERO_HASH
from ...chain.rules import ChainVerifier, ExpectedIndex, PayloadSlot, PutRow, verify_arguments
from ...chain.tree import CompactRange
from ...errors import UnreadableDatabase
from ...record import VerifyReport
from ..gc_pause import gc_paused
from ..types import PathArg, Progress
from .framing import (
    ENTRY_HEADER,
    FILE_MAGIC,
    FRAME_HEADER,
    HEADER_SIZE,
    TRAILER,
    Frame,
    HeaderError,
    decode_file_header,
)
from .index_columns import SortedIds
from .logfile import pread_into
from .reader import BIG_FRAME, CHUNK, Damage, Window, entry_offsets, not_regular, open_db, scan_log
from .scan import DIGEST, LEAVES, ScanResult, scan_frames
from .snapshot import read_erase_journal

_FH = FRAME_HEADER.size
SCAN_WINDOW = 16 * CHUNK  # the bytes the fast path scans at a time (or a frame, when it is larger)
_SCAN_COLUMNS = (("ver", "I"), ("slot_len", "I"), ("entry_len", "I"), ("seq", "q"), ("ts", "q"), ("size", "q"),
                 ("slot_off", "q"), ("entry_off", "q"))


@dataclass
class ScannedIndex(ExpectedIndex):
    """An ExpectedIndex that may hold, beside `live`, runs of new records as the scan core gave them
    (columns, ids as sorted blobs): FileStore.verify compares those with its index column by column
    (index_diff.py), with no tuple per record. `materialize` puts them in `live` as ExpectedIndex holds
    them, for whoever reads `live`."""

    runs: list[ScanResult] = field(default_factory=list)

    def materialize(self) -> None:
        """Every run's records into `live` (each run is of records that nothing after it changed)."""
        runs, self.runs = self.runs, []
        for res in runs:
            _put_run(self.live, res)


def _put_run(live: dict[str, PutRow], res: ScanResult) -> None:
    """The records of a scan of new records (version 1 each) as ExpectedIndex.live holds them."""
    ids, n = res.ids, res.entries
    cols = {name: array(tc, res.columns[name]) for name, tc in _SCAN_COLUMNS}
    scopes, agents, tagsets, hashes = res.scopes, res.agents, res.tagsets, res.hashes
    sc, ag, tg = array("I", res.scope_codes), array("I", res.agent_codes), array("I", res.tagset_codes)
    live.update(zip(ids, zip(
        ids, map(scopes.__getitem__, sc), map(list, map(tagsets.__getitem__, tg)), cols["ver"], cols["seq"],
        cols["ts"], map(agents.__getitem__, ag), cols["size"], [hashes[i:i + 32] for i in range(0, 32 * n, 32)],
        cols["slot_off"], cols["slot_len"], cols["entry_off"], cols["entry_len"], strict=True,
    ), strict=True))


class _DbVerifier(ChainVerifier):
    """The chain rules fed from a log file's frames, with what only a file has: a header, damaged
    stretches between frames, frame checksums, the erasure journal and files a crashed writer left."""

    FIRST_OFFSET = HEADER_SIZE
    ENTRY_HEADER_SIZE = ENTRY_HEADER.size
    PART_ERASED_IN_LAST_FRAME = True

    def __init__(
        self, path: str, size: int, pubkey: bytes | None, expect_head: tuple[int, bytes] | None
    ) -> None:
        super().__init__(pubkey, expect_head)
        self.path = path
        self.size = size
        self.journal: set[tuple[int, int]] | None = None
        self.pending_damage: tuple[Damage, int] | None = None
        # Scans of new records (version 1 each, ids ascending from run to run) not yet in `versions` nor
        # in the index's `live`: put there before the general path reads an entry (flush_runs), or
        # handed to a ScannedIndex as they are.
        self.runs: list[ScanResult] = []
        self.scratch = bytearray()  # the fast path's window (scan_window): scratch_len bytes from scratch_at
        self.scratch_at = self.scratch_len = 0

    def flush_runs(self) -> None:
        runs, self.runs = self.runs, []
        for res in runs:
            self.versions.update(dict.fromkeys(res.ids, 1))
            if self.index is not None:
                _put_run(self.index.live, res)

    # header and sidecars
    def header(self, data: bytes) -> None:
        if not data:
            self.problem("header", "the file is empty: not a Mnemo log", None, 0)
            return
        if not FILE_MAGIC.startswith(data[: len(FILE_MAGIC)]):
            self.problem("header", "bad file header: not a Mnemo log (bad magic)", None, 0)
            return
        try:
            self.db_id = decode_file_header(data)
        except HeaderError as exc:
            self.problem("header", f"bad file header: {exc}", None, 0)

    def load_journal(self) -> None:
        journal = self.path + ".erase"
        with contextlib.suppress(OSError):
            mode = os.stat(journal).st_mode
            if not stat.S_ISREG(mode):  # never opened: a FIFO would block the read
                self.journal = set()  # read as a damaged journal is: it lists nothing
                self.notes.append(not_regular(journal, mode) + ": not read as an erasure journal")
                return
        regions = read_erase_journal(journal)
        self.journal = None if regions is None else set(regions)
        if self.journal is not None:
            self.notes.append(
                f"an erasure journal ({os.path.basename(self.path)}.erase) lists {len(self.journal)} "
                "regions: an interrupted erasure the next writer completes"
            )

    def leftovers(self) -> None:
        for suffix in (".compact", ".snap.tmp", ".erase.tmp"):
            if os.path.exists(self.path + suffix):
                self.notes.append(
                    f"{os.path.basename(self.path)}{suffix} is left over from a writer that crashed; it may hold "
                    "payload bytes, and the next writer to open the database, or the next forget, removes it"
                )

    def erasure_listed(self, slot: PayloadSlot) -> bool:
        # exactly a slot: a journal never stands for anything but whole payload slots
        return self.journal is not None and (slot.offset, slot.length) in self.journal

    # damage
    def damage(self, d: Damage) -> None:
        self.flush_runs()
        exp = self.next_seq
        if d.torn:
            self.problem(
                "torn-tail",
                f"the last frame is incomplete ({self.size - d.offset} bytes at the end of the file): "
                f"a torn write that the next writer to open the log cuts off ({d.message})",
                exp, d.offset,
            )
            return
        if d.resume is None:
            self.problem("bad-frame", f"{d.message}; no readable frame follows "
                         f"({self.size - d.offset} bytes to the end of the file)", exp, d.offset)
            self.lost_before = True
            return
        self.pending_damage = (d, exp)

    def anchor(self) -> tuple[int, bytes]:
        """The (seq, hash) of the last entry read: what the entries after a damaged frame link to."""
        return (self.last_seq, self.last_hash) if self.last_hash is not None else (-1, ZERO_HASH)

    def resumed(self, first_seq: int) -> None:
        if self.pending_damage is None:
            return
        d, exp = self.pending_damage
        self.pending_damage = None
        resume = d.resume if d.resume is not None else d.offset
        lost = f"; entries seq {exp}..{first_seq - 1} are unreadable" if first_seq > exp else ""
        self.problem("bad-frame", f"{d.message}; {resume - d.offset} bytes skipped up to the next good "
                     f"frame at offset {resume}{lost}", exp, d.offset)
        self.lost_before = first_seq > exp

    # frames and entries
    def frame(self, frame: Frame, crc_ok: bool, win: Window) -> None:
        self.flush_runs()
        first = frame.entries[0].seq
        self.resumed(first)
        self.frame_last_seq = frame.entries[-1].seq
        if not crc_ok:
            last = frame.entries[-1].seq
            span = f"seq {first}" if first == last else f"seq {first}..{last}"
            self.problem("frame-checksum", f"frame checksum mismatch at offset {frame.offset} ({span}): "
                         "its entries were changed after it was written", first, frame.offset)
        if len(frame.entries) == 1:
            self.entry(frame.entries[0], frame.slots[0], frame.offset + FRAME_HEADER.size, win)
            return
        for e, slot, off in zip(frame.entries, frame.slots, entry_offsets(frame), strict=True):
            self.entry(e, slot, off, win)

    # the fast path
    def fast_frames(self, win: Window, pos: int) -> int:
        """Check the frames from `pos` on for as long as each holds only canonical puts with nothing wrong
        with them, read by the scan core (mnemo/storage/file/scan.py) instead of being decoded into
        objects; return the offset of the first frame left to the general path (`frame`), which then
        finds exactly what is wrong with it, or checks an op this path does not read.

        It makes every check `frame` and `op_put` make, to the same outcome, and changes the state as
        they would; a frame it leaves to the general path leaves no trace."""
        if self.pending_damage is not None or self.lost_before or self.last_hash is None or self.next_seq < 1:
            return pos
        want = self.expect_head[0] if self.expect_head is not None else -1
        flags = DIGEST | (LEAVES if self.tree is not None else 0)
        need = 0
        while pos + _FH <= win.size:
            # one scan over many frames (what it builds per distinct scope, agent or tag is made once)
            buf = self.scan_window(win, pos, need)
            res = scan_frames(buf, pos, 0, self.next_seq, self.last_hash, want, BIG_FRAME, flags)
            taken = self.take_scanned(res)
            if taken is not None:
                pos = taken  # a version that does not follow: the general path reports it
                break
            pos, need = pos + res.pos, res.need
            if need:  # the next frame is not whole in the buffer
                if pos + need > win.size:
                    break
            elif len(buf) - res.pos >= _FH:  # a frame the scan does not take
                break
            # else fewer bytes than a frame header are left in the buffer: read on
        self.hand_over(win, pos)
        return pos

    def scan_window(self, win: Window, pos: int, need: int) -> memoryview:
        """The file's bytes from `pos` on, at least `need` of them and a frame header (fewer only at the
        file's end): what the window read before holds from `pos`, when that is at least a CHUNK or runs to
        the file's end, else SCAN_WINDOW bytes (or `need`) read into the memory of the window before, which
        no scan result views (the scan copies what it returns): a verify reads every byte of the log, and
        fresh memory for each window costs the kernel more (a zeroed page and a fault for each) than the
        read. Progress is reported at each scan."""
        start, held = self.scratch_at, self.scratch_len
        rel, need = pos - start, max(need, _FH)
        if not (rel >= 0 and held - rel >= need and (held - rel >= CHUNK or start + held >= win.size)):
            n = max(0, min(max(SCAN_WINDOW, need), win.size - pos))
            if len(self.scratch) < n:
                self.scratch = bytearray(n)  # (a new one: the old cannot grow while a view of it is alive)
            try:
                held = pread_into(win.fd, memoryview(self.scratch)[:n], pos)
            except OSError as exc:
                raise UnreadableDatabase(f"cannot read {win.path} at offset {pos}: {exc.strerror}") from None
            self.scratch_at, self.scratch_len, rel = pos, held, 0
            if held < n:  # the file shrank under us: it ends here now
                win.size = pos + held
        if win.progress is not None:
            win.progress(min(pos, win.size), win.size)
        return memoryview(self.scratch)[rel:held]

    def hand_over(self, win: Window, pos: int) -> None:
        """The frame at `pos`, which the general path reads next, given to the window from the scan's
        window when that holds it (up to a CHUNK of it: the window reads on as it needs), so that a frame
        between runs of puts is not read from the file again with the CHUNK after it."""
        rel, held = pos - self.scratch_at, self.scratch_len
        if not 0 <= rel < held or win.start <= pos < win.start + len(win.buf):
            return
        take = min(held - rel, CHUNK)
        if take >= _FH:
            _magic, _count, _first, elen, plen = FRAME_HEADER.unpack_from(self.scratch, rel)
            take = min(take, _FH + elen + plen + TRAILER.size)
        win.buf, win.start = bytes(memoryview(self.scratch)[rel:rel + take]), pos

    def take_scanned(self, res: ScanResult) -> int | None:
        """Apply the scanned frames to the state, frame by frame; None when all were taken, else the
        offset of the first frame whose version numbers do not follow (nothing of it is applied)."""
        n = res.entries
        if not n:
            return None
        versions, index, tree = self.versions, self.index, self.tree
        vers = array("I", res.columns["ver"])
        seqs = array("q", res.columns["seq"])
        hashes = res.hashes
        if vers.count(1) == n and self._new_run(res):
            # every put a new record (the usual case): kept as the scan gave it (flush_runs)
            self.runs.append(res)
            if tree is not None:
                tree.add_leaf_hashes(res.leaves)
            self.entries += n
            self.next_seq = seqs[n - 1] + 1
            self.last_seq, self.last_hash = seqs[n - 1], hashes[(n - 1) * 32:]
            return None
        self.flush_runs()
        live, older = (index.live, index.older) if index is not None else ({}, {})
        ids = res.ids
        cols = {name: array(tc, res.columns[name]) for name, tc in _SCAN_COLUMNS}
        scopes, agents, tagsets = res.scopes, res.agents, res.tagsets
        sc, ag, tg = array("I", res.scope_codes), array("I", res.agent_codes), array("I", res.tagset_codes)
        k = 0
        for off, _end, count in res.frame_spans():
            if count == 1:
                if versions.get(ids[k], 0) + 1 != vers[k]:
                    return off
            else:
                seen: dict[str, int] = {}
                for i in range(k, k + count):
                    rid = ids[i]
                    ver = seen.get(rid) or versions.get(rid, 0) + 1
                    if vers[i] != ver:
                        return off
                    seen[rid] = ver + 1
            for i in range(k, k + count):
                rid = ids[i]
                ver = vers[i]
                versions[rid] = ver
                if index is not None:
                    if ver > 1:
                        older.setdefault(rid, []).append(live[rid])
                    live[rid] = (
                        rid, scopes[sc[i]], list(tagsets[tg[i]]), ver, seqs[i], cols["ts"][i], agents[ag[i]],
                        cols["size"][i], hashes[i * 32:i * 32 + 32], cols["slot_off"][i], cols["slot_len"][i],
                        cols["entry_off"][i], cols["entry_len"][i],
                    )
            if tree is not None:
                tree.add_leaf_hashes(res.leaves[k * 32:(k + count) * 32])
            k += count
            self.entries += count
            self.next_seq = seqs[k - 1] + 1
            self.last_seq, self.last_hash = seqs[k - 1], hashes[(k - 1) * 32:k * 32]
        return None

    def _new_run(self, res: ScanResult) -> bool:
        """Whether a scan of version-1 puts names only records nothing before it named, each once: its
        ids ascend, from after the last id of the runs before it, and none is in `versions`."""
        w = res.id_width
        if not w or res.id_run != res.entries:
            return False
        if self.runs:
            last = self.runs[-1]
            if last.id_width != w or res.id_bytes[:w] <= last.id_bytes[-w:]:
                return False
        versions = self.versions
        if not versions:
            return True
        if len(versions) > res.entries:
            return versions.keys().isdisjoint(res.ids)
        run = SortedIds(res.id_bytes, w)
        return all(run.find(rid) is None for rid in versions)

    def finish(self) -> None:
        self.resumed(self.next_seq)  # a resync always finds a frame, so this is a no-op
        super().finish()


def verify_db_and_index(
    path: PathArg, *, pubkey: bytes | None = None, expect_head: tuple[int, str] | None = None
) -> tuple[VerifyReport, ExpectedIndex]:
    """verify_db, and, from the same pass over the file, what a client's index of it must hold (for
    `Store.index_differences`; meaningful only when the report is ok). The snapshot file is left to
    the caller, which compares the index it serves."""
    index = ExpectedIndex.empty()
    report = verify_log(path, pubkey, expect_head, None, index)
    return report, index


def verify_db_and_scanned_index(
    path: PathArg, *, pubkey: bytes | None = None, expect_head: tuple[int, str] | None = None
) -> tuple[VerifyReport, ScannedIndex]:
    """verify_db_and_index, with the runs of new records the scan core read kept as columns
    (ScannedIndex), for FileStore.verify to compare with its index in bulk."""
    index = ScannedIndex({}, {}, set(), Acl())
    report = verify_log(path, pubkey, expect_head, None, index)
    return report, index


def verify_log(
    path: PathArg, pubkey: bytes | None, expect_head: tuple[int, str] | None, progress: Progress | None,
    index: ExpectedIndex | None,
) -> VerifyReport:
    """The log file at `path` checked completely, every problem reported (the arguments as verify_db's).
    With `index` (empty), what a client's index of the log must hold is gathered into it as well, with
    the Merkle tree over the entries."""
    head = verify_arguments(pubkey, expect_head)
    fd, size, name = open_db(path)
    try:
        v = _DbVerifier(name, size, pubkey, head)
        v.index = index
        if index is not None:
            v.tree = CompactRange()
        win = Window(fd, size, name, progress)
        v.header(win.get(0, HEADER_SIZE))
        v.load_journal()
        v.leftovers()
        with gc_paused():
            for item in scan_log(win, lenient=True, skip=v.fast_frames, anchor=v.anchor):
                if isinstance(item, Damage):
                    v.damage(item)
                else:
                    v.frame(item[0], item[1], win)
        if isinstance(index, ScannedIndex):
            index.runs = v.runs
        elif index is not None:
            v.flush_runs()  # (without an index, the runs' versions are needed by nothing after the pass)
        v.finish()
        if progress is not None:
            progress(win.size, win.size)
    finally:
        os.close(fd)
    report = v.report()
    if index is not None:
        index.head_seq, index.entries = report.head_seq, report.entries
        if v.tree is not None:
            tree_head = v.tree.head()
            index.tree = (tree_head.size, tree_head.root)
        index.head_hash = bytes.fromhex(report.head_hash) if report.head_hash else ZERO_HASH
    return report


__all__ = ["ScannedIndex", "verify_db_and_index", "verify_db_and_scanned_index", "verify_log"]
