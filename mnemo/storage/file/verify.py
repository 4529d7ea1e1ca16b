"""`verify_db`: a log file checked completely, with every problem reported (docs/FORMAT.md §5.1)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import stat
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...acl import Acl
from ...chain.codec import (
    FORMAT_VERSION,
    ZERO_HASH,
    Entry,
    decode_put_payload,
    unpackb,
)
from ...chain.rules import body_problem, checkpoint_findings, packed_problems, short_hash
from ...chain.tree import CompactRange
from ...errors import InvalidInput, MnemoError
from ...record import Problem, VerifyReport
from ..contract import PathArg, Progress, is_dsn
from ..gc_pause import gc_paused
from .framing import (
    ENTRY_HEADER,
    FILE_MAGIC,
    FRAME_HEADER,
    HEADER_SIZE,
    SLOT_CRC,
    Frame,
    HeaderError,
    Slot,
    decode_file_header,
)
from .reader import _BIG_FRAME, _Damage, _entry_offsets, _open_db, _scan, _Window, not_regular
from .scan import DIGEST, LEAVES, ScanResult, scan_frames
from .snapshot import read_erase_journal

# -- verify_db -------------------------------------------------------------------------------------------

_FH = FRAME_HEADER.size
_SCAN_COLUMNS = (("ver", "I"), ("slot_len", "I"), ("entry_len", "I"), ("seq", "q"), ("ts", "q"), ("size", "q"),
                 ("slot_off", "q"), ("entry_off", "q"))


PutRow = tuple[str, str, list[str], int, int, int, str, int, bytes, int, int, int, int]


@dataclass
class ExpectedIndex:
    """What the index of a client must hold, as the log says: gathered by verify_db in its one pass over
    the file (`verify_db_and_index`), for `Store.index_differences` to compare with."""

    # id -> its latest put since the last forget naming it, as
    # (id, scope, tags, ver, seq, ts_ns, agent, size, hash, slot offset, slot length, entry offset,
    # entry length)
    live: dict[str, PutRow]
    # id -> its earlier puts since that forget, oldest first (records with more than one version)
    older: dict[str, list[PutRow]]
    forgotten: set[str]  # every id a forget named
    acl: Acl
    head_seq: int = -1
    head_hash: bytes = ZERO_HASH
    entries: int = 0
    tree: tuple[int, bytes] | None = None  # (size, root) of the Merkle tree over the entries


class _DbVerifier:
    def __init__(
        self, path: str, size: int, pubkey: bytes | None, expect_head: tuple[int, bytes] | None
    ) -> None:
        self.path = path
        self.size = size
        self.pubkey = pubkey
        self.expect_head = expect_head
        self.problems: list[Problem] = []
        self.notes: list[str] = []
        self.db_id: bytes | None = None
        self.entries = 0
        self.last_seq = -1  # seq and hash of the last entry read
        self.last_hash: bytes | None = None
        self.next_seq = 0
        self.lost_before = False  # entries were lost to damage right before the next one read
        self.seen_first = False
        # Per record id, the versions no forget has named yet: the latest version number, and (only for
        # ids whose puts numbered their versions wrongly) how many more versions there are than that.
        self.versions: dict[str, int] = {}
        self.extra: dict[str, int] = {}
        # id -> [(seq, slot offset, state)] of those versions whose slot is not `ok`
        self.pending: dict[str, list[tuple[int, int, str]]] = {}
        self.index: ExpectedIndex | None = None  # gathered for a client's verify(), when asked
        self.tree: Any = None  # the CompactRange of the tree over the entries, when the index is gathered
        self.erased = 0
        self.awaiting = 0
        self.interrupted = 0
        self.checkpoints = 0
        self.signed_upto = -1
        self.keys: set[bytes] = set()
        self.head_hashes: list[bytes] = []
        self.journal: set[tuple[int, int]] | None = None
        self.pending_damage: tuple[_Damage, int] | None = None
        self.ops: dict[str, Callable[[Entry, Slot, int, _Window], None]] = {
            "genesis": self.op_genesis, "put": self.op_put, "forget": self.op_forget,
            "grant": self.op_grant, "revoke": self.op_grant, "checkpoint": self.op_checkpoint,
        }

    def problem(self, kind: str, message: str, seq: int | None, offset: int | None) -> None:
        self.problems.append(Problem(kind, message, seq, offset))

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

    def in_journal(self, slot: Slot) -> bool:
        # exactly a slot: a journal never stands for anything but whole payload slots
        return self.journal is not None and (slot.offset, slot.length) in self.journal

    # damage
    def damage(self, d: _Damage) -> None:
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
    def frame(self, frame: Frame, crc_ok: bool, win: _Window) -> None:
        first = frame.entries[0].seq
        self.resumed(first)
        if not crc_ok:
            last = frame.entries[-1].seq
            span = f"seq {first}" if first == last else f"seq {first}..{last}"
            self.problem("frame-checksum", f"frame checksum mismatch at offset {frame.offset} ({span}): "
                         "its entries were changed after it was written", first, frame.offset)
        if len(frame.entries) == 1:
            self.entry(frame.entries[0], frame.slots[0], frame.offset + FRAME_HEADER.size, win)
            return
        for e, slot, off in zip(frame.entries, frame.slots, _entry_offsets(frame), strict=True):
            self.entry(e, slot, off, win)

    def entry(self, e: Entry, slot: Slot, off: int, win: _Window) -> None:
        self.entries += 1
        if self.tree is not None:
            self.tree.append_entry(e.raw)
        last_hash = self.last_hash
        exp = self.next_seq
        before = self.last_seq if last_hash is not None else "?"
        if not self.seen_first:
            self.seen_first = True
            if e.seq != 0 and not self.lost_before:
                self.problem("genesis", f"the log starts at seq {e.seq}, not with genesis", e.seq, off)
        elif e.seq != exp:
            if e.seq > exp and not self.lost_before:
                missing = f"{exp}" if e.seq == exp + 1 else f"{exp}..{e.seq - 1}"
                msg = f"seq jumps from {before} to {e.seq}: entry {missing} is missing"
                self.problem("seq", msg, exp, off)
            elif e.seq < exp:
                self.problem("seq", f"seq {e.seq} out of order (after seq {before})", e.seq, off)
        if last_hash is not None and not self.lost_before and e.prev != last_hash:
            self.problem("link", f"prev of seq {e.seq} is {short_hash(e.prev)}, but the entry before it "
                         f"(seq {self.last_seq}) hashes to {short_hash(last_hash)}", e.seq, off)
        self.lost_before = False
        self.next_seq = max(self.next_seq, e.seq + 1)
        self.last_seq, self.last_hash = e.seq, e.hash
        if self.expect_head is not None and e.seq == self.expect_head[0]:
            self.head_hashes.append(e.hash)

        why = body_problem(e.op, e.body)
        if why is not None:
            self.problem("body", why, e.seq, off)
            if e.op == "put" and slot.state == "bad" and not self.in_journal(slot):
                self.problem("slot", f"payload slot checksum mismatch (seq {e.seq})", e.seq, slot.offset)
            return
        self.ops[e.op](e, slot, off, win)

    # the fast path
    def fast_frames(self, win: _Window, pos: int) -> int:
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
        while pos + _FH <= win.size:
            rel = pos - win.start
            if rel < 0 or rel + _FH > len(win.buf):
                win.ensure(pos, _FH)
                rel = pos - win.start
            res = scan_frames(win.buf, win.start, rel, self.next_seq, self.last_hash, want, _BIG_FRAME, flags)
            taken = self.take_scanned(res)
            if taken is not None:
                return taken  # a version that does not follow: the general path reports it
            pos = win.start + res.pos
            if res.need:  # the next frame is not whole in the buffer
                if pos + res.need > win.size:
                    break
                win.ensure(pos, res.need)
            elif len(win.buf) - res.pos >= _FH:  # a frame the scan does not take
                break
            # else fewer bytes than a frame header are left in the buffer: read on
        return pos

    def take_scanned(self, res: ScanResult) -> int | None:
        """Apply the scanned frames to the state, frame by frame; None when all were taken, else the
        offset of the first frame whose version numbers do not follow (nothing of it is applied)."""
        if not res.ids:
            return None
        versions, index, tree = self.versions, self.index, self.tree
        live, older = (index.live, index.older) if index is not None else ({}, {})
        ids = res.ids
        cols = {name: array(tc, res.columns[name]) for name, tc in _SCAN_COLUMNS}
        vers, seqs = cols["ver"], cols["seq"]
        scopes, agents, tagsets = res.scopes, res.agents, res.tagsets
        sc, ag, tg = array("I", res.scope_codes), array("I", res.agent_codes), array("I", res.tagset_codes)
        hashes = res.hashes
        spans = res.frame_spans()
        n = len(ids)
        if vers.count(1) == n and len(set(ids)) == n and versions.keys().isdisjoint(ids):
            # every put a new record (the usual case): the state is updated in bulk
            versions.update(zip(ids, vers, strict=True))
            if index is not None:
                live.update(zip(ids, zip(
                    ids, map(scopes.__getitem__, sc), map(list, map(tagsets.__getitem__, tg)), vers, seqs,
                    cols["ts"], map(agents.__getitem__, ag), cols["size"],
                    [hashes[i:i + 32] for i in range(0, 32 * n, 32)], cols["slot_off"], cols["slot_len"],
                    cols["entry_off"], cols["entry_len"], strict=True,
                ), strict=True))
            if tree is not None:
                tree.add_leaf_hashes(res.leaves)
            self.entries += n
            self.next_seq = seqs[n - 1] + 1
            self.last_seq, self.last_hash = seqs[n - 1], hashes[(n - 1) * 32:]
            return None
        k = 0
        for off, _end, count in spans:
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

    def no_payload(self, e: Entry, slot: Slot) -> None:
        if slot.state != "none":
            self.problem("payload", f"a {e.op} entry carries a payload slot ({slot.state})",
                         e.seq, slot.offset)

    def op_genesis(self, e: Entry, slot: Slot, off: int, win: _Window) -> None:
        if e.seq != 0:
            self.problem("genesis", f"genesis entry at seq {e.seq}", e.seq, off)
        else:
            if e.prev != ZERO_HASH:
                self.problem("genesis", "genesis prev is not 32 zero bytes", 0, off)
            if e.body["format"] != FORMAT_VERSION:
                msg = f"genesis format {e.body['format']}, expected {FORMAT_VERSION}"
                self.problem("genesis", msg, 0, off)
            if self.db_id is not None and e.body["db_id"] != self.db_id:
                self.problem("genesis", f"genesis db_id {e.body['db_id'].hex()} differs from the header's "
                             f"{self.db_id.hex()}", 0, off)
            elif self.db_id is None:
                self.db_id = e.body["db_id"]
            if self.index is not None:
                self.index.acl.owner = e.agent
        self.no_payload(e, slot)

    def seq0_check(self, e: Entry, off: int) -> None:
        if e.seq == 0:
            self.problem("genesis", f"seq 0 is a {e.op} entry, not genesis", 0, off)

    def op_put(self, e: Entry, slot: Slot, off: int, win: _Window) -> None:
        self.seq0_check(e, off)
        body = e.body
        rid, ver = body["id"], body["ver"]
        expected = self.versions.get(rid, 0) + 1
        if ver != expected:
            self.problem("version", f"seq {e.seq} puts version {ver} of record {rid}, expected {expected}",
                         e.seq, off)
            extra = expected + self.extra.pop(rid, 0) - ver  # versions not yet forgotten, minus ver
            if extra:
                self.extra[rid] = extra
        old = self.versions.get(rid, 0)
        self.versions[rid] = ver
        state = slot.state
        tags: list[str] = []
        if state == "ok":
            try:
                data = win.get(slot.offset + SLOT_CRC.size, slot.length - SLOT_CRC.size)
                salt, packed = decode_put_payload(data)
            except Exception as exc:
                msg = f"put payload does not decode: {exc}"
                self.problem("payload", msg, e.seq, slot.offset)
            else:
                msgs, fields = packed_problems(body, salt, packed)
                for msg in msgs:
                    self.problem("payload", f"record {rid} v{ver}: {msg}", e.seq, slot.offset)
                if fields is not None:
                    tags = list(fields[1])
        elif state == "bad":
            if self.in_journal(slot):
                state = "interrupted"
            else:
                self.problem("slot", f"payload slot checksum mismatch (seq {e.seq}, record {rid} v{ver})",
                             e.seq, slot.offset)
        if state != "ok":
            self.pending.setdefault(rid, []).append((e.seq, slot.offset, state))
        index = self.index
        if index is not None:
            if old:
                index.older.setdefault(rid, []).append(index.live[rid])
            index.live[rid] = (rid, body["scope"], tags, ver, e.seq, e.ts_ns, e.agent, body["size"], e.hash,
                               slot.offset, slot.length, off + ENTRY_HEADER.size, len(e.raw))

    def op_forget(self, e: Entry, slot: Slot, off: int, win: _Window) -> None:
        self.seq0_check(e, off)
        for rid in e.body["ids"]:
            named = self.versions.pop(rid, 0) + self.extra.pop(rid, 0)
            others = self.pending.pop(rid, ())
            self.awaiting += named - len(others)  # versions with an `ok` slot: erasure still to do
            for _seq, _off, state in others:
                if state in ("erased", "none"):
                    self.erased += 1
                elif state == "interrupted":
                    self.interrupted += 1
            if self.index is not None:
                self.index.live.pop(rid, None)
                self.index.older.pop(rid, None)
                self.index.forgotten.add(rid)
        if slot.state == "ok":
            start, length = slot.payload_range()
            try:
                obj = unpackb(win.get(start, length))
                if not (isinstance(obj, dict) and set(obj) == {"reason"}
                        and isinstance(obj["reason"], (str, type(None)))):
                    raise ValueError("not a map {reason: str or nil}")
            except Exception as exc:
                msg = f"forget payload does not decode: {exc}"
                self.problem("payload", msg, e.seq, slot.offset)
        elif slot.state in ("bad", "erased"):
            what = "checksum mismatch" if slot.state == "bad" else "is erased (all zero)"
            self.problem("slot", f"forget payload slot {what} (seq {e.seq})", e.seq, slot.offset)

    def op_grant(self, e: Entry, slot: Slot, off: int, win: _Window) -> None:
        self.seq0_check(e, off)
        self.no_payload(e, slot)
        if self.index is not None:
            body = e.body
            if e.op == "grant":
                self.index.acl.grant(body["principal"], body["scope"], body["perms"])
            else:
                self.index.acl.revoke(body["principal"], body["scope"], body["perms"])

    def op_checkpoint(self, e: Entry, slot: Slot, off: int, win: _Window) -> None:
        self.seq0_check(e, off)
        self.no_payload(e, slot)
        self.keys.add(e.body["key"])
        found = checkpoint_findings(e.seq, e.prev, e.body, self.db_id, self.pubkey)
        for kind, msg in found:
            self.problem(kind, msg, e.seq, off)
        if not found:
            self.checkpoints += 1
            if self.pubkey is not None:
                self.signed_upto = e.seq

    # the end
    def finish(self) -> None:
        self.resumed(self.next_seq)  # a resync always finds a frame, so this is a no-op
        if self.entries == 0 and not self.problems:
            self.problem("genesis", "the log holds no entries (no genesis)", None, HEADER_SIZE)
        for rid, versions in self.pending.items():
            for seq, offset, state in versions:
                if state == "erased":
                    self.problem("erased", f"payload of seq {seq} (record {rid}) is erased, but no later "
                                 "forget names the record", seq, offset)
                elif state == "none":
                    self.problem("payload", f"seq {seq} (record {rid}) has no payload, but no later forget "
                                 "names the record", seq, offset)
                elif state == "interrupted":
                    self.problem("slot", f"payload slot of seq {seq} (record {rid}) is damaged; DB.erase "
                                 "lists it, but no forget names the record", seq, offset)
        last_seq = self.last_seq if self.last_hash is not None else None
        if self.expect_head is not None:
            seq, want = self.expect_head
            if not self.head_hashes:
                end = f"it ends at seq {last_seq}" if last_seq is not None else "it holds no entries"
                self.problem("expect-head", f"the expected head seq {seq} is not in the log ({end}): "
                             "the log was truncated", seq, None)
            elif want not in self.head_hashes:
                self.problem("expect-head", f"seq {seq} hashes to {self.head_hashes[0].hex()}, not the "
                             f"expected {want.hex()}: the log was rewritten", seq, None)
        if self.pubkey is not None and last_seq is not None:
            if self.signed_upto < 0:
                self.problem("unsigned", "no checkpoint in the log is signed by the given key", None, None)
            elif last_seq > self.signed_upto:
                self.problem("unsigned", f"entries seq {self.signed_upto + 1}..{last_seq} follow the last "
                             "checkpoint signed by the given key: appended later, or its signed tail was "
                             "cut off", self.signed_upto + 1, None)
        if self.awaiting:
            self.notes.append(f"{self.awaiting} forgotten versions still hold their payload: erasure pending "
                              "(the next writer to open the log completes it)")
        if self.interrupted:
            self.notes.append(f"{self.interrupted} forgotten versions are part-way erased "
                              "(listed in DB.erase)")
        if self.checkpoints and self.pubkey is None:
            keys = ", ".join(sorted(k.hex() for k in self.keys))
            self.notes.append(f"checkpoint signatures were checked against the keys they name ({keys}); "
                              "give the expected public key to check who signed them")

    def report(self) -> VerifyReport:
        problems = sorted(self.problems, key=lambda p: (p.offset is None, p.offset or 0))
        last_hash = self.last_hash
        return VerifyReport(
            ok=not problems,
            entries=self.entries,
            head_seq=self.last_seq if last_hash is not None else -1,
            head_hash=last_hash.hex() if last_hash is not None else "",
            problems=tuple(problems),
            erased=self.erased,
            checkpoints=self.checkpoints,
            notes=tuple(self.notes),
        )


def _parse_expect_head(expect_head: tuple[int, str] | None) -> tuple[int, bytes] | None:
    if expect_head is None:
        return None
    seq, hexhash = expect_head
    try:
        raw = bytes.fromhex(hexhash)
    except (ValueError, TypeError):
        raw = b""
    if not (isinstance(seq, int) and seq >= 0 and len(raw) == 32):
        raise InvalidInput("expect_head must be (seq >= 0, 64 hex digits)")
    return seq, raw


def verify_db(
    path: PathArg,
    *,
    pubkey: bytes | None = None,
    expect_head: tuple[int, str] | None = None,
    progress: Progress | None = None,
) -> VerifyReport:
    """Check a database log file completely and report every problem found (docs/FORMAT.md §5.1).

    Reads the file in chunks, without opening it as a client, without locks and without writing.
    `pubkey`: raw 32-byte Ed25519 key every checkpoint must be signed by (and that must sign the head).
    `expect_head`: (seq, hex hash) saved earlier; the log must still hold that entry with that hash.
    `progress(done_bytes, total_bytes)` is called as the file is read.
    Raises UnreadableDatabase only if the file cannot be opened or read at all.

    `path` may also be a postgresql:// URI: the database is then checked through its backend (the same
    checks on its rows, and its derived tables against the chain)."""
    if isinstance(path, str) and is_dsn(path):
        from ...audit.sources import open_readonly

        with open_readonly(path) as store:
            return store.verify(pubkey, expect_head, progress)
    return _verify_db(path, pubkey, expect_head, progress, None)


def verify_db_and_index(
    path: PathArg, *, pubkey: bytes | None = None, expect_head: tuple[int, str] | None = None
) -> tuple[VerifyReport, ExpectedIndex]:
    """verify_db, and, from the same pass over the file, what a client's index of it must hold (for
    `Store.index_differences`; meaningful only when the report is ok). The snapshot file is left to
    the caller, which compares the index it serves."""
    index = ExpectedIndex({}, {}, set(), Acl())
    report = _verify_db(path, pubkey, expect_head, None, index, check_snapshot=False)
    return report, index


def _verify_db(
    path: PathArg, pubkey: bytes | None, expect_head: tuple[int, str] | None, progress: Progress | None,
    index: ExpectedIndex | None, check_snapshot: bool = True,
) -> VerifyReport:
    head = _parse_expect_head(expect_head)
    if pubkey is not None and not (isinstance(pubkey, bytes) and len(pubkey) == 32):
        raise InvalidInput("pubkey must be a raw 32-byte Ed25519 public key")
    fd, size, name = _open_db(path)
    snapshot = check_snapshot and os.path.exists(name + ".snap")
    if snapshot and index is None:
        index = ExpectedIndex({}, {}, set(), Acl())
    try:
        v = _DbVerifier(name, size, pubkey, head)
        v.index = index
        if index is not None:
            v.tree = CompactRange()
        win = _Window(fd, size, name, progress)
        v.header(win.get(0, HEADER_SIZE))
        v.load_journal()
        v.leftovers()
        with gc_paused():
            for item in _scan(win, lenient=True, skip=v.fast_frames, anchor=v.anchor):
                if isinstance(item, _Damage):
                    v.damage(item)
                else:
                    v.frame(item[0], item[1], win)
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
    if snapshot and report.ok and index is not None:
        problems, notes = check_snapshot_file(name, index)
        if problems or notes:
            report = dataclasses.replace(
                report, ok=not problems, problems=report.problems + tuple(problems), notes=report.notes + tuple(notes)
            )
    return report


def check_snapshot_file(path: str, expected: ExpectedIndex) -> tuple[list[Problem], list[str]]:
    """Whether the index snapshot beside a sound log holds exactly what the log says (problems), or is
    stale and would be ignored (notes). Opens the database as a read-only client would, from the
    snapshot, so that what is compared is what a client would serve."""
    from .store import FileStore as Store

    label = f"the index snapshot {os.path.basename(path)}.snap"
    try:
        store = Store(path, "", readonly=True)
    except MnemoError as exc:
        return [Problem("snapshot", f"{label}: the database does not open from it: {exc}")], []
    try:
        if store.snapshot_refused is not None:
            return [Problem("snapshot", f"{label} ends at this log's head but was refused "
                            f"({store.snapshot_refused}): it was altered; clients replay the log instead")], []
        if not store.snapshot_used:
            return [], [f"{label} is stale (clients ignore it; the next writer rewrites it)"]
        problems = [Problem("snapshot", f"{d}: {label} was altered") for d in store.index_differences(expected)]
        if expected.tree is not None and store.tree_head() != expected.tree:
            problems.append(Problem("snapshot", f"the Merkle tree state in {label} is not the tree over the log's "
                                    "entries: it was altered"))
        return problems, []
    finally:
        store.close()
