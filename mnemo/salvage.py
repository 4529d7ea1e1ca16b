"""Salvage: copy what still verifies out of a damaged database into a new one.

Damage in the middle of a log (anything but a torn last write) stops every writer from opening it, by
design (docs/FORMAT.md §3, "Reading and recovery"). `salvage(damaged, new)` reads the damaged log
leniently, through the reader `mnemo verify` reads it with (mnemo.storage.file.reader: a frame whose
only fault is its checksum is still read, and a damaged stretch is skipped up to the next frame of the
chain, never to a frame inside a record's content: docs/FORMAT.md §3, "Where the chain resumes"), and
copies every record version that still verifies into a new database, through MnemoClient's public API
alone: a fresh chain with new record ids.

What counts as verified, entry by entry:
- the entry's hash is vouched for by the next entry of the log, whose `prev` names it (seq + 1); where
  nothing follows to vouch (the end of the readable log, a damaged stretch, a gap in the seqs), its
  frame checksum must hold. So a changed entry is lost, even with its frame checksum recomputed, because
  the entry after it no longer links to it.
- a put's payload: its slot checksum holds, SHA-256 of it is the put's digest, and it decodes to content
  of the put's size with sorted tags.

Forgotten records stay forgotten. A forget entry that can be decoded at all, verified or not, forgets
its ids; a record with an erased payload (all zero, or cut by compaction) or one named by the erasure
journal was forgotten by a forget that the damage took, so none of its versions is copied either. (Only
a forget whose frame is unreadable and whose erasure had not even begun cannot be known.)

A payload slot that fails its checksum is damage, unless it is a part-way erasure, told apart as replay
and verify tell it (docs/FORMAT.md §3, §5.1): the forget that drops its version is in the log's last
frame (a forget's frame is fsynced, then its slots zeroed, before anything is appended after it, so a
crash can leave those slots, and only those, part-zeroed), or the erasure journal an older version
wrote (`DB.erase`) names exactly that slot and a forget names its record.

The new database's first entry is a provenance record in scope `mnemo:salvage` (readable by the owner,
who holds admin on `*`): the source path and db_id, the last good head before the first damage, the
head read, and what was lost. Its second version, written last, adds the map of old record ids to new
ones. Grants are not copied: a revoke lost to damage would otherwise come back as a permission; the
provenance record lists the grants as read. The new database is written beside NEW and linked into
place only once it is complete and on disk, so NEW never holds half a salvage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from . import audit
from .acl import Acl
from .chain.codec import ZERO_HASH, Entry, decode_put_payload, decode_record_fields, payload_digest, unpackb
from .chain.rules import body_problem
from .client import MnemoClient
from .errors import InvalidInput, MnemoError
from .storage.contract import Progress
from .storage.file import reader as file_reader
from .storage.file.atomic import check_own
from .storage.file.framing import HEADER_SIZE, Frame, HeaderError, Slot, decode_file_header
from .storage.file.logfile import pread
from .storage.file.snapshot import read_erase_journal
from .validation import Limits

__all__ = [
    "PROVENANCE_SCOPE",
    "PROVENANCE_TAG",
    "LostVersion",
    "NothingToSalvage",
    "SalvageReport",
    "salvage",
]

PROVENANCE_SCOPE = "mnemo:salvage"
PROVENANCE_TAG = "mnemo:salvage"
PROVENANCE_FORMAT = "mnemo-salvage/1"

# What the source held was accepted under its writers' limits: the copy must accept all of it.
_NO_LIMITS = Limits(max_content_bytes=1 << 62, max_tag_chars=1 << 30, max_tags=1 << 30,
                    max_metadata_bytes=1 << 62, max_id_chars=1 << 30)
_WRITES_PER_COMMIT = 256


class NothingToSalvage(MnemoError):
    """The database has no damage that salvage would repair: open it as usual."""


@dataclass(frozen=True)
class LostVersion:
    """A record version that was read but could not be copied, and why."""

    id: str
    version: int
    seq: int | None  # None: the version is known only from the numbering of those around it
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "version": self.version, "seq": self.seq, "reason": self.reason}


@dataclass(frozen=True)
class SalvageReport:
    """What a salvage read, copied and lost: `to_json()` for the whole report, `provenance()` for what the
    provenance record holds."""

    source: str
    source_db_id: str | None
    source_bytes: int
    owner: str
    new: str
    new_db_id: str
    new_head: tuple[int, str]
    provenance_id: str
    entries_read: int
    entries_verified: int
    last_good_head: tuple[int, str] | None  # the chain reads unbroken from genesis up to here
    head_read: tuple[int, str] | None  # the last entry read from the file
    damage: tuple[dict[str, Any], ...]  # the damaged stretches skipped: offset, bytes, torn, message
    checksum_frames: tuple[int, ...]  # offsets of frames read though their checksum fails
    damaged_slots: int  # payload slots whose checksum fails, forgotten versions' included
    header_problem: str | None
    lost_seq_ranges: tuple[tuple[int, int | None], ...]  # inclusive; None: to the end of the file
    lost_records: tuple[str, ...]  # ids read, none of whose versions could be copied
    lost_versions: tuple[LostVersion, ...]
    forgotten_unrecorded: tuple[str, ...]  # ids whose erased payloads show a forget the damage took
    lost_reasons: tuple[int, ...]  # seqs of forgets whose reason (their payload) is unreadable
    grants: tuple[dict[str, Any], ...]  # as read from the damaged log; not copied
    id_map: dict[str, str] = field(default_factory=dict)
    versions_copied: int = 0
    salvaged_at: str = ""

    @property
    def records_copied(self) -> int:
        return len(self.id_map)

    def provenance(self, final: bool) -> dict[str, Any]:
        """The content of the provenance record: its first version (written before anything is copied)
        holds what was read and lost; the final one adds the copies and the id map. Neither holds the
        new head, which the record's own entry decides."""
        doc = self.to_json(with_map=final)
        if final:
            doc["new"] = {k: v for k, v in doc["new"].items() if k != "head"}
        return doc

    def to_json(self, with_map: bool = True) -> dict[str, Any]:
        """The whole report as one JSON document (`mnemo salvage --json`)."""

        def head(h: tuple[int, str] | None) -> dict[str, Any] | None:
            return None if h is None else {"seq": h[0], "hash": h[1]}

        doc: dict[str, Any] = {
            "format": PROVENANCE_FORMAT,
            "salvaged_at": self.salvaged_at,
            "source": {"path": self.source, "db_id": self.source_db_id, "bytes": self.source_bytes},
            "owner": self.owner,
            "entries_read": self.entries_read,
            "entries_verified": self.entries_verified,
            "last_good_head": head(self.last_good_head),
            "head_read": head(self.head_read),
            "damage": list(self.damage),
            "checksum_frames": list(self.checksum_frames),
            "damaged_slots": self.damaged_slots,
            "header_problem": self.header_problem,
            "lost": {
                "seq_ranges": [list(r) for r in self.lost_seq_ranges],
                "records": list(self.lost_records),
                "versions": [v.to_json() for v in self.lost_versions],
                "forgotten_unrecorded": list(self.forgotten_unrecorded),
                "forget_reasons": list(self.lost_reasons),
            },
            "grants_not_copied": list(self.grants),
        }
        if with_map:
            doc.update({
                "new": {"path": self.new, "db_id": self.new_db_id, "head": head(self.new_head)},
                "provenance_id": self.provenance_id,
                "records_copied": self.records_copied,
                "versions_copied": self.versions_copied,
                "id_map": dict(self.id_map),
            })
        return doc


# -- reading the damaged log --------------------------------------------------------------------------


@dataclass
class _Version:
    seq: int
    rid: str
    ver: int
    scope: str
    size: int
    digest: bytes
    slot: Slot
    problem: str | None  # why it cannot be copied; None: it can


@dataclass
class _Read:
    """Everything the first pass learns; small per entry, so a large log fits."""

    path: str
    size: int
    header_db_id: bytes | None = None
    header_problem: str | None = None
    genesis: Entry | None = None  # a verified genesis
    entries: int = 0
    verified: int = 0
    last_good: tuple[int, str] | None = None
    chain_unbroken: bool = True
    head: tuple[int, str] | None = None
    damage: list[dict[str, Any]] = field(default_factory=list)
    checksum_frames: list[int] = field(default_factory=list)
    lost_seqs: list[tuple[int, int | None]] = field(default_factory=list)
    records: dict[str, list[_Version]] = field(default_factory=dict)  # since the last forget naming them
    forgotten: set[str] = field(default_factory=set)
    lost_reasons: list[int] = field(default_factory=list)
    bad_slots: int = 0
    part_erased: int = 0  # forgotten versions whose erasure a crash cut short: no damage
    journal: frozenset[tuple[int, int]] = frozenset()  # the slots an older version's erasure journal names
    acl: Acl = field(default_factory=Acl)

    def lose(self, first: int, last: int | None) -> None:
        """Seqs first..last (None: to the end) are lost; adjacent ranges merge."""
        before = self.lost_seqs[-1][1] if self.lost_seqs else None
        if before is not None and before + 1 == first:
            self.lost_seqs[-1] = (self.lost_seqs[-1][0], last)
        else:
            self.lost_seqs.append((first, last))


class _Reader:
    """The first pass: entries in file order, each judged once the item after it is known."""

    def __init__(self, read: _Read, win: file_reader.Window) -> None:
        self.read = read
        self.win = win
        # an entry waiting for its successor: (entry, slot, its frame's checksum holds, its frame's offset)
        self.pending: tuple[Entry, Slot, bool, int] | None = None
        self.last_seq = -1  # the last entry taken as part of the chain
        self.after_damage = False
        # record id -> the slots failing their checksum of its versions no forget has dropped yet; the seq
        # of the last entry of each forget's frame; and (that seq, a slot) for each such slot a forget dropped
        self.unexplained: dict[str, list[Slot]] = {}
        self.frame_last: dict[int, int] = {}
        self.dropped: list[tuple[int, Slot]] = []

    def feed_frame(self, frame: Frame, crc_ok: bool) -> None:
        if not crc_ok:  # damage even where every entry turns out to verify: no client opens the log
            self.read.checksum_frames.append(frame.offset)
        for e, slot in zip(frame.entries, frame.slots, strict=True):
            if e.seq <= self.last_seq:
                continue  # at or below a seq already taken: not the chain's next entry
            if e.op == "forget":
                self.frame_last[e.seq] = frame.entries[-1].seq
            if self.pending is not None:
                prev_e, prev_slot, prev_ok, prev_frame = self.pending
                if e.seq != prev_e.seq + 1:  # a gap in the seqs: nothing vouches for the entry before it
                    self.judge(prev_e, prev_slot, prev_ok)
                elif e.prev == prev_e.hash:
                    self.judge(prev_e, prev_slot, True)
                else:
                    # The link is broken. If only this entry's frame fails its checksum, this entry is
                    # the damaged one (its prev, say) and the one before stands on its own checksum;
                    # otherwise (both hold: a forger recomputed one) neither can be trusted.
                    self.judge(prev_e, prev_slot, prev_ok and not crc_ok and prev_frame != frame.offset)
            gap_from = self.last_seq + 1
            if e.seq > gap_from:
                self.read.lose(gap_from, e.seq - 1)
                self.read.chain_unbroken = False
            elif self.after_damage:
                self.read.chain_unbroken = False
            self.after_damage = False
            self.last_seq = e.seq
            self.pending = (e, slot, crc_ok, frame.offset)

    def feed_damage(self, damage: file_reader.Damage) -> None:
        self.flush()
        read = self.read
        end = damage.resume if damage.resume is not None else read.size
        read.damage.append({"offset": damage.offset, "bytes": end - damage.offset,
                            "torn": damage.torn, "message": damage.message})
        if not damage.torn:  # a torn last write is no break: the next writer would cut it off
            read.chain_unbroken = False
        self.after_damage = True
        if damage.resume is None:
            read.lose(self.last_seq + 1, None)

    def flush(self) -> None:
        """Judge the entry waiting for a successor that will not come (damage or the end follows)."""
        if self.pending is not None:
            e, slot, crc_ok, _frame = self.pending
            self.pending = None
            self.judge(e, slot, crc_ok)

    def finish(self) -> None:
        """Once the whole log is read: each slot failing its checksum is damage, unless the forget that
        dropped its version is in the log's last frame (a part-way erasure, which a writer completes)."""
        self.flush()
        read = self.read
        read.bad_slots += sum(len(slots) for slots in self.unexplained.values())
        for forget_end, _slot in self.dropped:
            if forget_end == self.last_seq:
                read.part_erased += 1
            else:
                read.bad_slots += 1
        self.unexplained.clear()
        self.dropped.clear()

    def judge(self, e: Entry, slot: Slot, verified: bool) -> None:
        read = self.read
        read.entries += 1
        read.head = (e.seq, e.hash.hex())
        if slot.state == "bad":  # damage even in a forgotten version's slot, unless it is a part-way erasure
            self.bad_slot(e, slot)
        if (e.seq == 0) != (e.op == "genesis") or (e.seq == 0 and e.prev != ZERO_HASH):
            verified = False
        if verified and body_problem(e.op, e.body) is not None:
            verified = False
        if verified and e.op not in ("put", "forget") and slot.state != "none":
            verified = False  # only puts and forgets carry a payload: this entry is not as written
        if e.op == "forget":
            self.forget(e)  # even unverified: forgetting more is safe, resurrecting is not
        if not verified:
            read.lose(e.seq, e.seq)
            read.chain_unbroken = False
            if e.op == "put" and _put_fields_ok(e.body):
                erased = slot.state in ("erased", "none")
                self.version(e, slot, "erased" if erased else "its chain entry does not verify")
            return
        read.verified += 1
        if read.chain_unbroken:
            read.last_good = (e.seq, e.hash.hex())
        if e.op == "genesis":
            read.genesis = e
            read.acl.owner = e.agent
        elif e.op == "put":
            self.version(e, slot, self.payload_problem(e, slot))
        elif e.op == "forget" and not self.reason_readable(slot):
            read.lost_reasons.append(e.seq)
        elif e.op == "grant":
            read.acl.grant(e.body["principal"], e.body["scope"], e.body["perms"])
        elif e.op == "revoke":
            read.acl.revoke(e.body["principal"], e.body["scope"], e.body["perms"])

    def bad_slot(self, e: Entry, slot: Slot) -> None:
        """A slot failing its checksum: a put's waits for the forget that drops its version (finish), one an
        older version's erasure journal names is an interrupted erasure if a forget names its record (as
        _plan decides), and any other is damage."""
        rid = e.body.get("id") if e.op == "put" else None
        if not isinstance(rid, str):
            self.read.bad_slots += 1
        elif (slot.offset, slot.length) in self.read.journal:
            self.read.part_erased += 1
        else:
            self.unexplained.setdefault(rid, []).append(slot)

    def forget(self, e: Entry) -> None:
        ids = e.body.get("ids")
        if not isinstance(ids, list):
            return
        forget_end = self.frame_last.pop(e.seq, -1)
        for rid in ids:
            if isinstance(rid, str):
                self.read.records.pop(rid, None)
                self.read.forgotten.add(rid)
                self.dropped.extend((forget_end, slot) for slot in self.unexplained.pop(rid, ()))

    def version(self, e: Entry, slot: Slot, problem: str | None) -> None:
        b = e.body
        v = _Version(e.seq, b["id"], b["ver"], b["scope"], b["size"], b["digest"], slot, problem)
        self.read.records.setdefault(v.rid, []).append(v)

    def reason_readable(self, slot: Slot) -> bool:
        """Whether a forget's payload (its reason) is absent or intact."""
        if slot.state == "none":
            return True
        if slot.state != "ok":
            return False
        start, length = slot.payload_range()
        try:
            obj = unpackb(self.win.get(start, length))
        except Exception:  # msgpack raises several unrelated types on garbage
            return False
        return isinstance(obj, dict) and set(obj) == {"reason"} and isinstance(obj["reason"], (str, type(None)))

    def payload_problem(self, e: Entry, slot: Slot) -> str | None:
        if slot.state in ("erased", "none"):
            return "erased"
        if slot.state == "bad":
            return "its payload slot checksum does not match"
        start, length = slot.payload_range()
        try:
            _fields(self.win.get(start, length), e.body["digest"], e.body["size"])
        except ValueError as exc:
            return str(exc)
        return None


def _put_fields_ok(body: dict[str, Any]) -> bool:
    return (isinstance(body.get("id"), str) and isinstance(body.get("scope"), str)
            and isinstance(body.get("ver"), int) and isinstance(body.get("size"), int)
            and isinstance(body.get("digest"), bytes))


def _fields(payload: bytes, digest: bytes, size: int) -> tuple[str | bytes, tuple[str, ...], dict[str, Any]]:
    """The content, tags and metadata of a put payload that matches its entry; ValueError otherwise."""
    salt, packed = decode_put_payload(payload)
    if payload_digest(salt, packed) != digest:
        raise ValueError("its payload does not match the digest its entry commits to")
    try:
        content, tags, metadata = decode_record_fields(packed)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise ValueError(f"its payload does not decode: {exc}") from None
    n = len(content.encode("utf-8", "surrogatepass")) if isinstance(content, str) else len(content)
    if n != size:
        raise ValueError(f"its content is {n} bytes, its entry says {size}")
    if not all(isinstance(t, str) for t in tags) or list(tags) != sorted(tags):
        raise ValueError("its tags are not a sorted list of strings")
    return content, tags, metadata


def _read_log(path: str, progress: Progress | None) -> _Read:
    fd, size, name = file_reader.open_db(path)
    try:
        read = _Read(name, size, journal=frozenset(read_erase_journal(name + ".erase") or ()))
        win = file_reader.Window(fd, size, name, progress, growable=False)
        try:
            read.header_db_id = decode_file_header(win.get(0, HEADER_SIZE))
        except HeaderError as exc:
            read.header_problem = str(exc)
        reader = _Reader(read, win)
        for item in file_reader.scan_log(win, lenient=True):
            if isinstance(item, file_reader.Damage):
                reader.feed_damage(item)
            else:
                reader.feed_frame(item[0], item[1])
        reader.finish()
        if progress is not None:
            progress(size, size)
    finally:
        os.close(fd)
    return read


# -- deciding what is copied ----------------------------------------------------------------------------


@dataclass
class _Plan:
    copies: list[_Version]  # in chain order
    lost_records: list[str]
    lost_versions: list[LostVersion]
    forgotten_unrecorded: list[str]


def _plan(read: _Read) -> _Plan:
    journal = read.journal
    copies: list[_Version] = []
    lost_records: list[str] = []
    lost_versions: list[LostVersion] = []
    forgotten_unrecorded: list[str] = []
    for rid, versions in read.records.items():
        if any(v.problem == "erased" or (v.slot.offset, v.slot.length) in journal for v in versions):
            forgotten_unrecorded.append(rid)  # erasure happens only to forgotten records
            continue
        kept = [v for v in versions if v.problem is None]
        for v in versions:
            if v.problem is not None:
                lost_versions.append(LostVersion(rid, v.ver, v.seq, v.problem))
        seen = {v.ver for v in versions}
        for ver in range(1, max(seen) + 1):
            if ver not in seen:
                lost_versions.append(LostVersion(rid, ver, None, "its chain entry is in a damaged stretch"))
        if kept:
            copies.extend(kept)
        else:
            lost_records.append(rid)
    copies.sort(key=lambda v: v.seq)
    lost_versions.sort(key=lambda v: (v.id, v.version))
    return _Plan(copies, sorted(lost_records), lost_versions, sorted(forgotten_unrecorded))


def _grants(acl: Acl) -> list[dict[str, Any]]:
    return [{"principal": p, "scope": s, "perms": sorted(perms)}
            for p, scopes in sorted(acl.grants.items()) for s, perms in sorted(scopes.items())]


# -- writing the new database ---------------------------------------------------------------------------


@contextlib.contextmanager
def _temporary_db(new: str) -> Iterator[str]:
    """A database path beside `new`, removed with its sidecars unless it was linked into place."""
    tmp = f"{new}.salvage{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a dead run's, or a link planted at this name: the database is made fresh
    try:
        yield tmp
    finally:
        for suffix in ("", ".snap", ".snap.tmp", ".erase", ".erase.tmp", ".compact", ".leaves"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp + suffix)


def _commit_file(tmp: str, new: str) -> None:
    """Put the finished database at `new`: on disk first, then linked (never over an existing file)."""
    fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
        made = os.fstat(fd)
    finally:
        os.close(fd)
    check_own(tmp, made)  # link() puts a link itself in place: only the database written may go there
    os.link(tmp, new)  # FileExistsError if something appeared at `new` meanwhile
    directory = os.open(os.path.dirname(os.path.abspath(new)) or ".", os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _provenance_text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def salvage(
    damaged: str | os.PathLike[str],
    new: str | os.PathLike[str],
    *,
    owner: str | None = None,
    progress: Progress | None = None,
) -> SalvageReport:
    """Copy every record version of the damaged database at `damaged` that still verifies into a new
    database at `new`, which must not exist; return what was read, copied and lost.

    `owner` is the agent that owns the new database (default: the damaged one's owner, the agent of its
    genesis entry). `progress(done, total)` follows the reading of the damaged file. Raises
    NothingToSalvage when the log has no damage salvage would repair, InvalidInput when `new` exists or
    the owner cannot be known, audit.UnreadableDatabase when the file cannot be read at all."""
    source = os.path.abspath(os.fspath(damaged))
    target = os.path.abspath(os.fspath(new))
    if os.path.lexists(target):
        raise InvalidInput(f"{target} exists: salvage writes a new database and never overwrites a file")
    read = _read_log(source, progress)
    plan = _plan(read)
    if read.entries == 0:
        raise NothingToSalvage(f"{source}: no chain entry could be read: nothing to salvage")
    damaged_somewhere = (
        read.header_problem is not None or not read.chain_unbroken or read.verified < read.entries
        or read.checksum_frames
        or plan.lost_versions or plan.forgotten_unrecorded or read.lost_reasons or read.bad_slots
    )
    if not damaged_somewhere:
        what = "only its last write is incomplete, which the next writer cuts off" if read.damage else \
            "every entry and payload verifies"
        if read.part_erased:
            what += (f", but for {read.part_erased} forgotten versions whose erasure a crash cut short, which the "
                     "next writer completes")
        raise NothingToSalvage(f"{source}: nothing to salvage: {what}; open it as usual")
    if owner is None:
        if read.genesis is None:
            raise InvalidInput(f"{source}: its genesis entry does not verify, so its owner is unknown: "
                               "name the new database's owner (owner=..., or --owner on the command line)")
        owner = read.genesis.agent
    db_id = read.header_db_id if read.header_db_id is not None else (
        read.genesis.body["db_id"] if read.genesis is not None else None)
    report = SalvageReport(
        source=source, source_db_id=db_id.hex() if db_id is not None else None, source_bytes=read.size,
        owner=owner, new=target, new_db_id="", new_head=(-1, ""), provenance_id="",
        entries_read=read.entries, entries_verified=read.verified, last_good_head=read.last_good,
        head_read=read.head, damage=tuple(read.damage), checksum_frames=tuple(read.checksum_frames),
        damaged_slots=read.bad_slots,
        header_problem=read.header_problem,
        lost_seq_ranges=tuple(read.lost_seqs),
        lost_records=tuple(plan.lost_records), lost_versions=tuple(plan.lost_versions),
        forgotten_unrecorded=tuple(plan.forgotten_unrecorded), lost_reasons=tuple(read.lost_reasons),
        grants=tuple(_grants(read.acl)),
        salvaged_at=audit.format_ts(time.time_ns()),
    )
    with _temporary_db(target) as tmp:
        report = _write(source, tmp, report, plan.copies)
        _commit_file(tmp, target)
    return report


def _write(source: str, tmp: str, report: SalvageReport, copies: list[_Version]) -> SalvageReport:
    id_map: dict[str, str] = {}
    refused: set[str] = set()
    lost = list(report.lost_versions)
    copied = 0
    fd = os.open(source, os.O_RDONLY)
    try:
        with MnemoClient(tmp, report.owner, durability="none", limits=_NO_LIMITS) as client:
            provenance = client.remember(_provenance_text(report.provenance(final=False)),
                                         tags=[PROVENANCE_TAG], scope=PROVENANCE_SCOPE,
                                         metadata={"source": report.source, "source_db_id": report.source_db_id})
            for start in range(0, len(copies), _WRITES_PER_COMMIT):
                with client.transaction():
                    for v in copies[start:start + _WRITES_PER_COMMIT]:
                        problem = _copy(client, fd, v, id_map, refused)
                        if problem is None:
                            copied += 1
                        else:
                            lost.append(LostVersion(v.rid, v.ver, v.seq, problem))
            lost_records = sorted(set(report.lost_records) | (refused - set(id_map)))
            lost.sort(key=lambda v: (v.id, v.version))
            report = _replace(report, id_map=id_map, versions_copied=copied, lost_versions=tuple(lost),
                              lost_records=tuple(lost_records), provenance_id=provenance.id, new_db_id=client.db_id)
            # the map is known only now: the provenance record's second version
            client.update(provenance.id, content=_provenance_text(report.provenance(final=True)))
            report = _replace(report, new_head=client.head)
    finally:
        os.close(fd)
    return report


def _replace(report: SalvageReport, **changes: Any) -> SalvageReport:
    return dataclasses.replace(report, **changes)


def _copy(client: MnemoClient, fd: int, v: _Version, id_map: dict[str, str], refused: set[str]) -> str | None:
    """Write one version: the record's first kept version is a remember, later ones are updates.
    Returns why it was not copied, or None."""
    if v.rid in refused:
        return "the new database refused the record's first kept version"
    start, length = v.slot.payload_range()
    try:
        content, tags, metadata = _fields(pread(fd, length, start), v.digest, v.size)
    except ValueError as exc:
        return str(exc)
    try:
        new_id = id_map.get(v.rid)
        if new_id is None:
            id_map[v.rid] = client.remember(content, tags=tags, metadata=metadata, scope=v.scope).id
        else:
            client.update(new_id, content=content, tags=tags, metadata=metadata)
    except InvalidInput as exc:  # something the library now refuses (a name, a metadata value)
        if v.rid not in id_map:
            refused.add(v.rid)
        return f"the new database refused it: {exc}"
    return None
