"""`salvage` and `mnemo salvage` on databases damaged on purpose: a flipped byte in a middle frame, a
zeroed stretch, a damaged forget frame, damage to a record's only version and to one of several, a
forged entry, a damaged header or genesis; what is copied, what is reported lost, that forgotten records
stay forgotten, and that refusals leave every file as it was."""

from __future__ import annotations

import json
import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.frames import FORGED_CONTENT, forged_put_frame, read_frames
from helpers.logs import fix_frame_crc
from helpers.reliability_faults import Fault, Injector
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemo import IntegrityError, InvalidInput, MnemoClient, audit
from mnemo.cli import main
from mnemo.errors import DurabilityError
from mnemo.salvage import PROVENANCE_SCOPE, NothingToSalvage, SalvageReport, salvage
from mnemo.storage.file.framing import Frame
from mnemo.tools.server import MnemoMemoryToolServer

HASH = re.compile(r"[0-9a-f]{64}")


@dataclass
class Source:
    path: Path
    ids: dict[str, str]  # name -> record id
    frames: dict[int, Frame]  # seq -> the frame holding it

    def data(self) -> bytearray:
        return bytearray(self.path.read_bytes())

    def damaged(self, data: bytearray, name: str = "damaged.mnemo.db") -> Path:
        target = self.path.with_name(name)
        target.write_bytes(bytes(data))
        return target

    def entry_offset(self, seq: int) -> int:
        """File offset of the entry bytes of `seq` (after its length fields)."""
        frame = self.frames[seq]
        pos = frame.offset + 24
        for e in frame.entries:
            pos += 8
            if e.seq == seq:
                return pos
            pos += len(e.raw)
        raise AssertionError(seq)

    def slot(self, seq: int) -> tuple[int, int]:
        frame = self.frames[seq]
        slot = frame.slots[[e.seq for e in frame.entries].index(seq)]
        return slot.offset, slot.length


def seqs_of(path: Path) -> dict[int, Frame]:
    return {e.seq: f for f in read_frames(path) for e in f.entries}


@pytest.fixture
def source(tmp_path: Path) -> Source:
    """seq 0 genesis; 1 A v1; 2 B v1 (team:x); 3 grant; 4 A v2; 5 C v1 (binary); 6 A v3; 7 D v1; 8 forget D;
    9 E v1; 10-12 one frame: F, G, H v1; 13 revoke; 14 I v1."""
    path = tmp_path / "source.mnemo.db"
    ids: dict[str, str] = {}
    with MnemoClient(path, "owner", durability="none") as c:
        ids["A"] = c.remember("alpha one", tags=["a", "greek"], metadata={"n": 1}).id
        ids["B"] = c.remember("bravo", tags=["b"], metadata={"k": "v", "deep": {"x": [1, 2]}}, scope="team:x").id
        c.grant("bob", "team:*", ["read", "write"])
        c.update(ids["A"], content="alpha two", metadata={"n": 2})
        ids["C"] = c.remember(b"\x00\x01 binary \xff", tags=["bin"]).id
        c.update(ids["A"], content="alpha three", tags=["a"], metadata={"n": 3})
        ids["D"] = c.remember("delta: the user's secret", tags=["secret"]).id
        c.forget(ids["D"], reason="the user asked")
        ids["E"] = c.remember("echo, alone").id
        with c.transaction():
            ids["F"] = c.remember("foxtrot").id
            ids["G"] = c.remember("golf").id
            ids["H"] = c.remember("hotel").id
        c.revoke("bob", "team:*", ["write"])
        ids["I"] = c.remember("india").id
    return Source(path, ids, seqs_of(path))


def contents(path: Path, agent: str = "owner") -> dict[str, list[Any]]:
    """Every record of a database but provenance: id -> [(content, tags, metadata, scope) per version]."""
    with MnemoClient(path, agent, readonly=True) as c:
        assert c.verify().ok
        return {r.id: [(v.content, v.tags, v.metadata, v.scope) for v in c.history(r.id)]
                for r in c.query() if r.scope != PROVENANCE_SCOPE}


def provenance(path: Path) -> list[Any]:
    with MnemoClient(path, "owner", readonly=True) as c:
        (record,) = c.query(scope=PROVENANCE_SCOPE)
        return [(json.loads(v.content), v.tags, v.metadata) for v in c.history(record.id)]


def check_copies(report: SalvageReport, source: Source, expected: dict[str, list[Any]]) -> None:
    """The new database holds exactly `expected` (old name -> versions), under the ids the map gives."""
    by_new = contents(Path(report.new))
    assert set(report.id_map) == {source.ids[name] for name in expected}
    assert by_new == {report.id_map[source.ids[name]]: versions for name, versions in expected.items()}
    assert report.records_copied == len(expected)
    assert report.versions_copied == sum(len(v) for v in expected.values())


A1 = ("alpha one", ("a", "greek"), {"n": 1}, "agent:owner")
A2 = ("alpha two", ("a", "greek"), {"n": 2}, "agent:owner")
A3 = ("alpha three", ("a",), {"n": 3}, "agent:owner")
B1 = ("bravo", ("b",), {"deep": {"x": [1, 2]}, "k": "v"}, "team:x")
C1 = (b"\x00\x01 binary \xff", ("bin",), {}, "agent:owner")
ALL = {"A": [A1, A2, A3], "B": [B1], "C": [C1], "E": [("echo, alone", (), {}, "agent:owner")],
       "F": [("foxtrot", (), {}, "agent:owner")], "G": [("golf", (), {}, "agent:owner")],
       "H": [("hotel", (), {}, "agent:owner")], "I": [("india", (), {}, "agent:owner")]}


def without(*names: str, **changed: list[Any]) -> dict[str, list[Any]]:
    out = {k: v for k, v in ALL.items() if k not in names}
    out.update(changed)
    return out


# -- content bytes never become chain entries ------------------------------------------------------------


def carrier_source(path: Path, links: bool) -> tuple[int, dict[str, str]]:
    """A record, then one whose content holds a forged frame (a put into agent:alice, its checksums and
    digest valid) claiming seq 1,000,000 or (`links`) the carrier's own seq, linked to the entry before
    it; then three more records. Returns the carrier's seq and the text of each record by id."""
    with MnemoClient(path, "owner", durability="none") as c:
        texts = {c.remember("before").id: "before"}
        head = c.head
        forged = forged_put_frame(head[0] + 1, bytes.fromhex(head[1])) if links else forged_put_frame(1_000_000)
        carrier = c.remember(b"a file I was given: " + forged + b" (end of file)", tags=["carrier"])
        for i in range(3):
            texts[c.remember(f"after {i}").id] = f"after {i}"
    return carrier.seq, texts


# one byte of each field of the carrier's frame header: its magic; count to 0; first seq; entries length
# +64 KiB (past the end of the file); payloads length
HEADER_BYTES = {"magic": 0, "count": 7, "first-seq": 15, "entries-length": 17, "payloads-length": 23}


@pytest.mark.parametrize("links", [False, True], ids=["seq-1000000", "linked-to-the-entry-before"])
@pytest.mark.parametrize("field", sorted(HEADER_BYTES))
def test_a_frame_inside_a_records_content_is_never_copied(tmp_path: Path, field: str, links: bool) -> None:
    """One byte of the carrier's frame header damaged: the reading resumes at the next frame of the chain,
    never at the forged frame inside the carrier's content. The forged put is not copied (no record of
    agent:alice), every record after the carrier is, and only the carrier's seq is lost."""
    path = tmp_path / "source.mnemo.db"
    seq, texts = carrier_source(path, links)
    frames = seqs_of(path)
    carrier, after = frames[seq], frames[seq + 1]
    data = bytearray(path.read_bytes())
    data[carrier.offset + HEADER_BYTES[field]] ^= 0x01
    damaged = path.with_name("damaged.mnemo.db")
    damaged.write_bytes(bytes(data))
    report = salvage(damaged, tmp_path / "new.mnemo.db")
    assert [(d["offset"], d["bytes"], d["torn"]) for d in report.damage] == [(carrier.offset, carrier.length, False)]
    assert report.lost_seq_ranges == ((seq, seq),) and report.lost_versions == () and report.lost_records == ()
    assert report.head_read is not None and report.head_read[0] == seq + 3
    assert set(report.id_map) == set(texts)
    copied = contents(Path(report.new))
    assert sorted(versions[0][0] for versions in copied.values()) == sorted(texts.values())
    assert {versions[0][3] for versions in copied.values()} == {"agent:owner"}
    assert FORGED_CONTENT.encode() not in Path(report.new).read_bytes()
    # verify resumes at the same frame
    (problem,) = audit.verify_db(damaged).problems
    assert (problem.kind, problem.offset) == ("bad-frame", carrier.offset)
    assert f"{carrier.length} bytes skipped up to the next good frame at offset {after.offset}" in problem.message


@pytest.mark.parametrize("links", [False, True], ids=["seq-1000000", "linked-to-the-entry-before"])
def test_a_frame_inside_a_records_content_is_never_copied_when_the_carriers_entry_is_unreadable(
    tmp_path: Path, links: bool
) -> None:
    """The carrier's own entry damaged too, so that nothing of its frame can be read: the forged frame,
    linked to the entry before or not, does not start a run of frames to the end of the file; the chain's
    next frame does, and the reading resumes there."""
    path = tmp_path / "source.mnemo.db"
    seq, texts = carrier_source(path, links)
    frames = seqs_of(path)
    carrier = frames[seq]
    data = bytearray(path.read_bytes())
    data[carrier.offset] ^= 0x01  # its magic
    data[carrier.offset + 32] ^= 0x01  # its entry is a msgpack array of 7: now of 6
    damaged = path.with_name("damaged.mnemo.db")
    damaged.write_bytes(bytes(data))
    report = salvage(damaged, tmp_path / "new.mnemo.db")
    assert [(d["offset"], d["bytes"]) for d in report.damage] == [(carrier.offset, carrier.length)]
    assert report.lost_seq_ranges == ((seq, seq),)
    assert set(report.id_map) == set(texts)
    assert {versions[0][3] for versions in contents(Path(report.new)).values()} == {"agent:owner"}


# -- a flipped byte in a middle frame ------------------------------------------------------------------------


def test_a_flipped_byte_in_an_entry(source: Source) -> None:
    data = source.data()
    data[source.entry_offset(4) + 70] ^= 0x01  # inside A v2's entry: its frame checksum fails
    damaged = source.damaged(data)
    before = damaged.read_bytes()
    assert not audit.verify_db(damaged).ok
    report = salvage(damaged, damaged.with_name("new.mnemo.db"))
    good = [e for e in read_frames(source.path) for e in e.entries]
    assert report.entries_read == 15 and report.entries_verified == 14
    assert report.last_good_head == (3, good[3].hash.hex())
    assert report.head_read == (14, good[14].hash.hex())
    assert report.damage == () and report.lost_seq_ranges == ((4, 4),)
    assert report.checksum_frames == (source.frames[4].offset,) and report.damaged_slots == 0
    assert [v.to_json() for v in report.lost_versions] == [
        {"id": source.ids["A"], "version": 2, "seq": 4, "reason": "its chain entry does not verify"}]
    assert report.lost_records == () and report.forgotten_unrecorded == ()
    check_copies(report, source, without("D", A=[A1, A3]))
    assert source.ids["D"] not in report.id_map  # forgotten stays forgotten
    assert damaged.read_bytes() == before  # the damaged file is only read


def test_a_flipped_byte_in_a_payload_of_one_of_several_versions(source: Source) -> None:
    data = source.data()
    offset, length = source.slot(4)
    data[offset + length - 3] ^= 0x40  # A v2's payload: its slot checksum fails
    report = salvage(source.damaged(data), source.path.with_name("new.mnemo.db"))
    head = (14, [e for f in read_frames(source.path) for e in f.entries][14].hash.hex())
    assert report.last_good_head == report.head_read == head  # the chain itself is whole
    assert report.lost_seq_ranges == () and report.entries_verified == 15
    assert report.checksum_frames == () and report.damaged_slots == 1
    assert [(v.id, v.version, v.seq, v.reason) for v in report.lost_versions] == [
        (source.ids["A"], 2, 4, "its payload slot checksum does not match")]
    check_copies(report, source, without("D", A=[A1, A3]))
    new_a = report.id_map[source.ids["A"]]
    with MnemoClient(report.new, "owner", readonly=True) as c:
        assert [v.version for v in c.history(new_a)] == [1, 2]  # the latest version last
        assert c.get(new_a).content == "alpha three"


def test_damage_to_a_records_only_version(source: Source) -> None:
    data = source.data()
    offset, length = source.slot(9)
    data[offset + length - 2] ^= 0xFF  # E v1, its only version
    report = salvage(source.damaged(data), source.path.with_name("new.mnemo.db"))
    assert report.lost_records == (source.ids["E"],)
    assert [(v.id, v.version, v.reason) for v in report.lost_versions] == [
        (source.ids["E"], 1, "its payload slot checksum does not match")]
    check_copies(report, source, without("D", "E"))


def test_a_payload_changed_with_its_checksum_recomputed(source: Source) -> None:
    data = source.data()
    offset, length = source.slot(5)
    payload = bytes(data[offset + 4:offset + length]).replace(b"binary", b"BINARY")
    data[offset:offset + length] = struct.pack(">I", __import__("zlib").crc32(payload)) + payload
    report = salvage(source.damaged(data), source.path.with_name("new.mnemo.db"))
    assert [(v.id, v.reason) for v in report.lost_versions] == [
        (source.ids["C"], "its payload does not match the digest its entry commits to")]
    check_copies(report, source, without("C", "D"))


def test_a_changed_entry_with_its_frame_checksum_recomputed(source: Source) -> None:
    data = source.data()
    at = source.entry_offset(6)
    raw = bytes(data[at:at + len(source.frames[6].entries[0].raw)])
    i = raw.index(b"agent:owner")
    data[at + i:at + i + 11] = b"agent:other"  # a forger moves A v3 to another scope...
    fix_frame_crc(data, source.frames[6].offset)  # ...and fixes the frame checksum, as they would
    report = salvage(source.damaged(data), source.path.with_name("new.mnemo.db"))
    # the next entry no longer links to it: A v3 is lost, and so is nothing else
    assert report.lost_seq_ranges == ((6, 6),)
    assert [(v.version, v.seq, v.reason) for v in report.lost_versions] == [(3, 6, "its chain entry does not verify")]
    check_copies(report, source, without("D", A=[A1, A2]))


def test_one_changed_entry_in_a_frame_of_several(source: Source) -> None:
    data = source.data()
    assert source.frames[10] is source.frames[11] is source.frames[12]
    data[source.entry_offset(11) + 70] ^= 0x02  # G, the middle one of the transaction's frame
    report = salvage(source.damaged(data), source.path.with_name("new.mnemo.db"))
    assert report.lost_seq_ranges == ((11, 11),)  # F and H are vouched for by the entries after them
    assert [(v.id, v.version) for v in report.lost_versions] == [(source.ids["G"], 1)]
    assert report.lost_records == (source.ids["G"],)
    check_copies(report, source, without("D", "G"))


# -- a zeroed stretch ----------------------------------------------------------------------------------------


def test_a_zeroed_stretch(source: Source) -> None:
    data = source.data()
    start, end = source.frames[4].offset, source.frames[6].offset + source.frames[6].length
    data[start:end] = bytes(end - start)  # seq 4..6: A v2, C, A v3
    damaged = source.damaged(data)
    report = salvage(damaged, damaged.with_name("new.mnemo.db"))
    assert report.damage == ({"offset": start, "bytes": end - start, "torn": False,
                              "message": f"bad frame magic at offset {start}"},)
    assert report.lost_seq_ranges == ((4, 6),)
    assert report.last_good_head is not None and report.last_good_head[0] == 3
    # A v2 and v3 were in the stretch: nothing read says they existed, so A keeps v1; C is not known at all
    assert report.lost_versions == () and report.lost_records == ()
    check_copies(report, source, without("C", "D", A=[A1]))


def test_a_stretch_cut_after_a_later_version_was_read(source: Source) -> None:
    data = source.data()
    start, end = source.frames[4].offset, source.frames[5].offset + source.frames[5].length
    data[start:end] = b"\xa5" * (end - start)  # A v2 and C: garbage, but A v3 survives
    report = salvage(source.damaged(data), source.path.with_name("new.mnemo.db"))
    assert report.lost_seq_ranges == ((4, 5),)
    assert [v.to_json() for v in report.lost_versions] == [
        {"id": source.ids["A"], "version": 2, "seq": None, "reason": "its chain entry is in a damaged stretch"}]
    check_copies(report, source, without("C", "D", A=[A1, A3]))


def test_damage_to_the_end_of_the_file(source: Source) -> None:
    data = source.data()
    start = source.frames[13].offset
    data[start:] = b"\xee" * (len(data) - start)  # from the revoke on: nothing readable after it
    report = salvage(source.damaged(data), source.path.with_name("new.mnemo.db"))
    assert report.lost_seq_ranges == ((13, None),)
    assert report.damage[0]["offset"] == start and report.damage[0]["bytes"] == len(data) - start
    # the revoke was lost with it: grants are listed as read, never copied
    assert report.grants == ({"principal": "bob", "scope": "team:*", "perms": ["read", "write"]},)
    check_copies(report, source, without("D", "I"))
    with MnemoClient(report.new, "owner", readonly=True) as c:
        assert c.permissions("bob") == {"agent:bob": ("admin", "forget", "read", "write")}


# -- forgotten records stay forgotten -------------------------------------------------------------------------


def test_a_zeroed_forget_frame_does_not_bring_the_record_back(source: Source) -> None:
    data = source.data()
    forget = source.frames[8]
    data[forget.offset:forget.offset + forget.length] = bytes(forget.length)
    damaged = source.damaged(data)
    assert b"secret" not in damaged.read_bytes()  # the forget had erased D before the damage
    report = salvage(damaged, damaged.with_name("new.mnemo.db"))
    assert report.lost_seq_ranges == ((8, 8),)
    assert report.forgotten_unrecorded == (source.ids["D"],)
    check_copies(report, source, without("D"))


def test_a_forget_whose_id_was_changed_does_not_bring_the_record_back(source: Source) -> None:
    data = source.data()
    at = source.entry_offset(8)
    raw = source.frames[8].entries[0].raw
    i = raw.index(source.ids["D"].encode())
    # names another id now, one no record has (ids made in one millisecond may differ in the last digit)
    taken = set(source.ids.values())
    digit = next(d for d in "0123456789abcdef" if source.ids["D"][:-1] + d not in taken)
    data[at + i + 31] = ord(digit)
    report = salvage(source.damaged(data), source.path.with_name("new.mnemo.db"))
    assert report.lost_seq_ranges == ((8, 8),) and report.forgotten_unrecorded == (source.ids["D"],)
    check_copies(report, source, without("D"))


def test_a_forget_with_a_damaged_reason_still_forgets(source: Source) -> None:
    data = source.data()
    offset, length = source.slot(8)
    data[offset + length - 1] ^= 0x01  # the reason, in the forget's payload
    damaged = source.damaged(data)
    with pytest.raises(IntegrityError, match="payload slot damaged"):  # no client can open it any more
        MnemoClient(damaged, "owner", readonly=True)
    report = salvage(damaged, damaged.with_name("new.mnemo.db"))
    assert report.lost_reasons == (8,) and report.lost_seq_ranges == () and report.forgotten_unrecorded == ()
    check_copies(report, source, without("D"))


def test_a_forget_whose_erasure_a_crash_left_pending(tmp_path: Path) -> None:
    """A forget lost to damage before its erasure ran is known from the erasure journal."""
    from helpers.erase_journal import write_erase_journal

    path = tmp_path / "j.mnemo.db"
    with MnemoClient(path, "owner", durability="none") as c:
        keep = c.remember("kept").id
        gone = c.remember("to be erased").id
        c.remember("after")
    frames = seqs_of(path)
    slot = frames[2].slots[0]
    write_erase_journal(str(path) + ".erase", bytes(16), [(slot.offset, slot.length)])
    data = bytearray(path.read_bytes())
    data[frames[3].offset + 2] ^= 1  # and the frame after it is damaged, as the lost forget's would be
    path.write_bytes(bytes(data))
    report = salvage(path, tmp_path / "new.mnemo.db")
    assert report.forgotten_unrecorded == (gone,) and set(report.id_map) == {keep}


def _crash_in_an_erasure(path: Path) -> tuple[str, str]:
    """A database a crash left as erasure leaves it now: the forget of a record of two versions is on disk,
    in the log's last frame, and the zeros over its first slot stopped half-way (an injected I/O error in
    the middle of the pwrite). Returns the ids of the record kept and of the one forgotten."""
    with MnemoClient(path, "owner") as c:
        keep = c.remember("kept").id
        gone = c.remember("first version " * 20, tags=["k"]).id
        c.update(gone, content="second version " * 20)
        fault = Fault(at=1, action="eio", when="torn", torn=0.5, kinds=frozenset({"pwrite"}), zeros_only=True)
        with Injector(str(path.parent), fault=fault), pytest.raises(DurabilityError):
            c.forget([gone])
    return keep, gone


def test_a_part_way_erasure_in_the_last_frame_is_no_damage(tmp_path: Path) -> None:
    """A slot a crash left part-zeroed, whose version the forget in the log's last frame drops, is what
    replay and verify accept (docs/FORMAT.md §3, §5.1): salvage finds nothing to salvage either."""
    path = tmp_path / "crash" / "m.mnemo.db"
    path.parent.mkdir()
    _crash_in_an_erasure(path)
    frames = read_frames(path)
    assert any(slot.state == "bad" for f in frames for slot in f.slots)  # the part-zeroed slot
    report = audit.verify_db(path)
    assert report.ok and any("part-way erased" in note for note in report.notes)
    new = tmp_path / "new.mnemo.db"
    with pytest.raises(NothingToSalvage) as refused:
        salvage(path, new)
    assert str(refused.value) == (
        f"{path}: nothing to salvage: every entry and payload verifies, but for 1 forgotten versions whose erasure "
        "a crash cut short, which the next writer completes; open it as usual")
    assert not new.exists()


def test_a_part_way_erasure_beside_damage_is_not_counted_as_a_damaged_slot(tmp_path: Path) -> None:
    path = tmp_path / "crash" / "m.mnemo.db"
    path.parent.mkdir()
    keep, gone = _crash_in_an_erasure(path)
    frames = seqs_of(path)
    data = bytearray(path.read_bytes())
    data[frames[1].offset + 30] ^= 1  # damage to the frame of `kept`: the record is lost
    path.write_bytes(bytes(data))
    report = salvage(path, tmp_path / "new.mnemo.db")
    assert report.damaged_slots == 0 and report.forgotten_unrecorded == ()
    assert keep not in report.id_map and gone not in report.id_map
    assert report.lost_seq_ranges == ((1, 1),), report


def test_a_slot_part_zeroed_whose_forget_is_not_the_last_frame_is_damage(tmp_path: Path) -> None:
    """A forget followed by other frames had its erasure done before they were appended: a slot of its
    that fails its checksum is damage, as verify says."""
    path = tmp_path / "m.mnemo.db"
    with MnemoClient(path, "owner", durability="none") as c:
        c.remember("kept")
        gone = c.remember("first version " * 20).id
        original = path.read_bytes()
        c.forget([gone])
        c.remember("after")
    slot = seqs_of(path)[2].slots[0]
    data = bytearray(path.read_bytes())
    half = slot.offset + slot.length // 2
    data[half:slot.offset + slot.length] = original[half:slot.offset + slot.length]
    path.write_bytes(bytes(data))
    assert not audit.verify_db(path).ok
    report = salvage(path, tmp_path / "new.mnemo.db")
    assert report.damaged_slots == 1 and gone not in report.id_map


# -- the header and genesis ----------------------------------------------------------------------------------


def test_a_damaged_header(source: Source) -> None:
    data = source.data()
    data[20] ^= 0x01  # a db_id byte: the header checksum fails
    report = salvage(source.damaged(data), source.path.with_name("new.mnemo.db"))
    genesis = source.frames[0].entries[0]
    assert report.source_db_id == genesis.body["db_id"].hex()
    assert report.header_problem == "file header checksum mismatch"
    assert report.lost_seq_ranges == () and report.lost_versions == () and report.damage == ()
    check_copies(report, source, without("D"))


def test_a_damaged_genesis_needs_an_owner(source: Source) -> None:
    data = source.data()
    genesis = source.frames[0]
    data[genesis.offset + 30] ^= 0x01
    damaged = source.damaged(data)
    new = damaged.with_name("new.mnemo.db")
    with pytest.raises(InvalidInput, match="its genesis entry does not verify, so its owner is unknown"):
        salvage(damaged, new)
    assert not new.exists() and not list(damaged.parent.glob("new.mnemo.db*"))
    report = salvage(damaged, new, owner="rescuer")
    assert report.owner == "rescuer" and report.last_good_head is None and report.lost_seq_ranges == ((0, 0),)
    assert report.source_db_id == genesis.entries[0].body["db_id"].hex()  # from the header
    with MnemoClient(new, "rescuer", readonly=True) as c:
        assert len(c.query()) == len(ALL) + 1  # every record but D, and the provenance record


# -- what NEW holds: provenance first ----------------------------------------------------------------------


def test_the_provenance_record(source: Source) -> None:
    data = source.data()
    data[source.entry_offset(4) + 70] ^= 0x01
    damaged = source.damaged(data)
    new = damaged.with_name("new.mnemo.db")
    report = salvage(damaged, new)
    entries = [item.entry for item in audit.read_log(new)]
    assert entries[1].op == "put" and entries[1].body["id"] == report.provenance_id  # the first entry after genesis
    assert entries[1].body["scope"] == PROVENANCE_SCOPE and entries[-1].body["id"] == report.provenance_id
    assert report.new_head == (entries[-1].seq, entries[-1].hash.hex())
    (v1, tags1, meta1), (v2, tags2, _meta2) = provenance(new)
    assert tags1 == tags2 == ("mnemo:salvage",)
    assert meta1 == {"source": str(damaged), "source_db_id": report.source_db_id}
    assert v1 == report.provenance(final=False) == report.to_json(with_map=False) and "id_map" not in v1
    assert v2 == report.provenance(final=True)
    assert {**v2, "new": {**v2["new"], "head": {"seq": report.new_head[0], "hash": report.new_head[1]}}} == \
        report.to_json()
    assert v2["source"] == {"path": str(damaged), "db_id": report.source_db_id, "bytes": len(data)}
    assert report.last_good_head is not None
    assert v2["last_good_head"] == {"seq": 3, "hash": report.last_good_head[1]}
    assert v2["lost"]["seq_ranges"] == [[4, 4]]
    assert v2["id_map"] == report.id_map and v2["new"]["db_id"] == report.new_db_id
    assert HASH.fullmatch(v2["head_read"]["hash"]) and v2["format"] == "mnemo-salvage/1"
    # the owner reads it; another agent does not even see it
    with MnemoClient(new, "bob", readonly=True) as bob:
        assert bob.query(scope=PROVENANCE_SCOPE) == []
    assert not list(new.parent.glob("new.mnemo.db.salvage*"))  # no temporary file left


def test_memory_tool_files_survive(tmp_path: Path) -> None:
    path = tmp_path / "m.mnemo.db"
    with MnemoClient(path, "agent-1", durability="none") as c:
        server = MnemoMemoryToolServer(c)
        server.execute({"command": "create", "path": "/memories/a.md", "file_text": "one\n"})
        server.execute({"command": "create", "path": "/memories/b.md", "file_text": "two\n"})
        server.execute({"command": "rename", "old_path": "/memories/b.md", "new_path": "/memories/dir/b.md"})
    frames = seqs_of(path)
    data = bytearray(path.read_bytes())
    data[frames[1].offset + 32 + 70] ^= 0x01  # in a.md's only version's entry (its digest)
    path.write_bytes(bytes(data))
    new = tmp_path / "new.mnemo.db"
    salvage(path, new)
    with MnemoClient(new, "agent-1") as c:
        server = MnemoMemoryToolServer(c)
        assert server.execute({"command": "view", "path": "/memories/dir/b.md"}).text.endswith("1\ttwo\n     2\t")
        assert server.execute({"command": "view", "path": "/memories/a.md"}).is_error
        assert [r.version for r in server.history("/memories/dir/b.md")] == [1, 2]


# -- refusals -----------------------------------------------------------------------------------------------


def test_nothing_to_salvage(source: Source, tmp_path: Path) -> None:
    new = tmp_path / "new.mnemo.db"
    with pytest.raises(NothingToSalvage, match="nothing to salvage: every entry and payload verifies; open it as"):
        salvage(source.path, new)
    torn = source.damaged(source.data()[:-7], "torn.mnemo.db")
    with pytest.raises(NothingToSalvage, match="only its last write is incomplete, which the next writer cuts off"):
        salvage(torn, new)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    with pytest.raises(NothingToSalvage, match="no chain entry could be read"):
        salvage(empty, new)
    assert not new.exists() and not list(tmp_path.glob("new.mnemo.db*"))


def test_new_must_not_exist(source: Source, tmp_path: Path) -> None:
    data = source.data()
    data[source.entry_offset(4) + 70] ^= 0x01
    damaged = source.damaged(data)
    new = tmp_path / "new.mnemo.db"
    new.write_text("precious")
    with pytest.raises(InvalidInput, match="exists: salvage writes a new database and never overwrites a file"):
        salvage(damaged, new)
    assert new.read_text() == "precious"
    with pytest.raises(InvalidInput):
        salvage(damaged, damaged)


def test_progress(source: Source) -> None:
    data = source.data()
    data[source.entry_offset(4) + 70] ^= 0x01
    damaged = source.damaged(data)
    calls: list[tuple[int, int]] = []
    salvage(damaged, damaged.with_name("new.mnemo.db"), progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1] == (len(data), len(data))


# -- the command ----------------------------------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command(source: Source, capsys: pytest.CaptureFixture[str]) -> None:
    data = source.data()
    data[source.entry_offset(4) + 70] ^= 0x01
    forget = source.frames[13]
    data[forget.offset:forget.offset + forget.length] = bytes(forget.length)  # and the revoke
    damaged = source.damaged(data)
    new = damaged.with_name("new.mnemo.db")
    code, out, err = run(capsys, "salvage", str(damaged), str(new))
    assert (code, err) == (0, "")
    (_v1, _t, _m), (doc, _t2, _m2) = provenance(new)
    new_head = list(audit.read_log(new))[-1].entry
    good = [e for f in read_frames(source.path) for e in f.entries]
    assert out.splitlines() == [
        f"salvaged {damaged} into {new}: a new chain, db_id {doc['new']['db_id']}, "
        f"head {new_head.seq}:{new_head.hash.hex()}",
        "read 14 entries, 13 verified",
        f"last good head before the damage: 3:{good[3].hash.hex()}",
        f"last entry read: 14:{good[14].hash.hex()}",
        f"copied 8 records (9 versions); provenance record {doc['provenance_id']} in scope mnemo:salvage "
        "(where they came from, and old id -> new id)",
        "damage found:",
        f"  a damaged stretch at offset {forget.offset}, {forget.length} bytes, skipped: bad frame magic at "
        f"offset {forget.offset}",
        f"  the frame at offset {source.frames[4].offset}: its checksum does not match (its entries were checked "
        "one by one)",
        "lost:",
        "  entries seq 4",
        "  entries seq 13",
        f"  record {source.ids['A']} v2 (seq 4): its chain entry does not verify",
        "not copied: the grants (a revoke lost to the damage would come back as a permission). Those read, to "
        "grant again as needed:",
        f"  mnemo grant {new} bob 'team:*' read write",
    ]
    newer = damaged.with_name("newer.mnemo.db")
    code, out, err = run(capsys, "salvage", str(damaged), str(newer), "--json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    final = provenance(newer)[1][0]
    assert report == {**final, "new": {**final["new"], "head": report["new"]["head"]}}
    entries = list(audit.read_log(newer))
    assert report["new"]["head"] == {"seq": entries[-1].entry.seq, "hash": entries[-1].entry.hash.hex()}
    assert report["checksum_frames"] == [source.frames[4].offset] and report["header_problem"] is None
    assert report["lost"] == {"seq_ranges": [[4, 4], [13, 13]], "records": [], "forgotten_unrecorded": [],
                              "forget_reasons": [], "versions": [
                                  {"id": source.ids["A"], "version": 2, "seq": 4,
                                   "reason": "its chain entry does not verify"}]}


def test_the_command_refuses(source: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new = tmp_path / "new.mnemo.db"
    code, out, err = run(capsys, "salvage", str(source.path), str(new))
    assert (code, out) == (1, "") and err == (
        f"mnemo: NothingToSalvage: {source.path}: nothing to salvage: every entry and payload verifies; open it "
        "as usual\n")
    code, out, err = run(capsys, "salvage", str(source.path), str(new), "--json")
    assert (code, out) == (1, "") and json.loads(err)["error"]["type"] == "NothingToSalvage"
    existing = tmp_path / "existing.db"
    existing.write_bytes(b"keep me")
    assert run(capsys, "salvage", str(source.path), str(existing)) == (
        2, "", f"mnemo: error: {existing} exists: salvage writes a new database and never overwrites a file\n")
    assert run(capsys, "salvage", str(tmp_path / "missing"), str(new)) == (
        2, "", f"mnemo: error: cannot open {tmp_path / 'missing'}: No such file or directory\n")
    assert run(capsys, "salvage", str(source.path), str(tmp_path / "no" / "dir.db")) == (
        2, "", f"mnemo: error: cannot write {tmp_path / 'no' / 'dir.db'}: no directory {tmp_path / 'no'}\n")
    assert run(capsys, "salvage", str(source.path), str(new), "--owner", "") == (
        2, "", "mnemo: error: --owner: agent must be a non-empty string, got ''\n")
    assert existing.read_bytes() == b"keep me" and not new.exists()


# -- a property: whatever the damage, nothing wrong is ever copied ----------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_whatever_the_damage(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    """Random writes, updates and forgets, then a random flipped byte or zeroed stretch: salvage either
    finds nothing to do, or writes a database that verifies in which every record is a copy of an old one,
    its versions a subsequence of the old versions in order, no forgotten record's content anywhere, and
    every old live record either copied or reported lost."""
    tmp = tmp_path_factory.mktemp("prop")
    path = tmp / "p.mnemo.db"
    versions: dict[str, list[str]] = {}
    forgotten: dict[str, list[str]] = {}
    with MnemoClient(path, "owner", durability="none") as c:
        for step in range(data.draw(st.integers(3, 14), label="writes")):
            live = sorted(versions)
            action = data.draw(st.sampled_from(["new", "update", "forget"] if live else ["new"]))
            if action == "new":
                versions[c.remember(f"record {step} v1 " + "x" * step, tags=[f"t{step % 3}"]).id] = [
                    f"record {step} v1 " + "x" * step]
            elif action == "update":
                rid = data.draw(st.sampled_from(live))
                text = f"{rid[-6:]} v{len(versions[rid]) + 1} at {step}"
                c.update(rid, content=text)
                versions[rid].append(text)
            else:
                rid = data.draw(st.sampled_from(live))
                forgotten[rid] = versions.pop(rid)
                c.forget(rid)
    raw = bytearray(path.read_bytes())
    if data.draw(st.booleans(), label="zero a stretch"):
        start = data.draw(st.integers(32, len(raw) - 1))
        end = data.draw(st.integers(start + 1, min(len(raw), start + 600)))
        raw[start:end] = bytes(end - start)
    else:
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] ^= data.draw(st.integers(1, 255))
    path.write_bytes(bytes(raw))
    new = tmp / "new.mnemo.db"
    try:
        report = salvage(path, new, owner="owner")
    except NothingToSalvage as refused:
        assert not new.exists()
        problems = audit.verify_db(path).problems
        if "no chain entry could be read" in str(refused):
            # the damage took every frame, the genesis one too: the verifier reports it, nothing is copied
            assert problems and problems[0].offset == 32 and problems[0].kind == "bad-frame", problems
        else:
            # then nothing is wrong but, at most, a torn last write that the next writer cuts off
            assert {p.kind for p in problems} <= {"torn-tail"}
        return
    copied = contents(new)
    assert set(copied) == set(report.id_map.values())
    old_of = {v: k for k, v in report.id_map.items()}
    for new_id, kept in copied.items():
        old = versions.get(old_of[new_id])
        assert old is not None, "a forgotten or unknown record was copied"
        texts = [k[0] for k in kept]
        assert texts == [t for t in old if t in texts] and texts[-1] in old  # a subsequence, in order
    blob = b"".join(p.read_bytes() for p in tmp.glob("new.mnemo.db*"))
    for texts in forgotten.values():
        for text in texts:
            assert text.encode() not in blob, "a forgotten record came back"
    lost = set(report.lost_records) | {v.id for v in report.lost_versions}
    # every old live record that salvage read is copied or reported lost (those inside a damaged stretch
    # are covered by its seq range)
    for rid in versions:
        assert rid in report.id_map or rid in lost or report.lost_seq_ranges or report.damage
    assert os.path.getsize(path) == len(raw)


def test_a_frame_whose_checksum_alone_is_damaged(source: Source) -> None:
    data = source.data()
    frame = source.frames[9]
    data[frame.offset + frame.length - 8] ^= 0x01  # the checksum itself: every entry still verifies
    damaged = source.damaged(data)
    with pytest.raises(IntegrityError):  # yet no client opens the log
        MnemoClient(damaged, "owner", readonly=True)
    report = salvage(damaged, damaged.with_name("new.mnemo.db"))
    assert report.checksum_frames == (frame.offset,) and report.entries_verified == report.entries_read == 15
    assert report.lost_seq_ranges == () and report.lost_versions == () and report.lost_records == ()
    check_copies(report, source, without("D"))


def test_a_link_at_the_salvage_temp_name_is_removed_not_followed(source: Source) -> None:
    """The new database is written under NEW.salvagePID first: a link planted there (to another file) is
    removed, never written through; the new database is a regular file, made 0600."""
    data = source.data()
    data[source.entry_offset(4) + 70] ^= 0x01
    damaged = source.damaged(data)
    victim = source.path.with_name("victim")
    victim.write_bytes(b"precious, not Mnemo's")
    new = damaged.with_name("new.mnemo.db")
    Path(f"{new}.salvage{os.getpid()}").symlink_to(victim)
    assert salvage(damaged, new).versions_copied > 0
    assert victim.read_bytes() == b"precious, not Mnemo's"
    assert not new.is_symlink() and stat.S_IMODE(new.stat().st_mode) == 0o600
    assert not os.path.lexists(f"{new}.salvage{os.getpid()}")
