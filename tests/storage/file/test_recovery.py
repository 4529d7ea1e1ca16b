"""Recovery on open and verification of a damaged log: a torn tail is cut and reported, anything else is
refused with the offset of the damaged frame, and verify reports every single-byte change."""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.frames import forged_put_frame, frame_spans, read_frames

from mnemo import MemoryRecord, MnemoClient
from mnemo.audit import verify_db
from mnemo.errors import IntegrityError, NotFound
from mnemo.storage.file.framing import FRAME_HEADER, HEADER_SIZE, TRAILER

AGENT = "agent-1"


@dataclass
class Built:
    data: bytes  # the whole log
    before_last: dict[str, MemoryRecord]  # every record as it was before the last frame
    head_before_last: tuple[int, str]
    after: dict[str, MemoryRecord]  # every record with the last frame applied


def build(path: Path, last: str) -> Built:
    """A small db whose last frame is one put ("put"), a transaction ("tx") or a forget ("forget")."""
    with MnemoClient(path, AGENT, durability="none") as c:
        a = c.remember("alpha", tags=["x"], metadata={"n": 1})
        b = c.remember(b"\x00beta", tags=["y", "x"])
        c.update(a.id, content="alpha 2")
        c.remember("gamma " * 20, tags=["z"])
        before = {r.id: r for r in c.query()}
        head = c.head
        if last == "put":
            c.remember("the last one", tags=["x"])
        elif last == "tx":
            with c.transaction():
                c.remember("tx one", tags=["t"])
                c.update(b.id, content=b"beta 2")
                c.remember("tx two", tags=["t"])
        else:
            c.forget(a.id, reason="gone")
        after = {r.id: r for r in c.query()}
    Path(str(path) + ".snap").unlink(missing_ok=True)
    return Built(path.read_bytes(), before, head, after)


def records(c: MnemoClient) -> dict[str, MemoryRecord]:
    return {r.id: r for r in c.query()}


def flip(data: bytes, pos: int, mask: int) -> bytes:
    return data[:pos] + bytes([data[pos] ^ mask]) + data[pos + 1 :]


# -- a torn last frame ---------------------------------------------------------------------------------


@pytest.mark.parametrize("last", ["put", "tx"])
def test_truncation_anywhere_inside_the_last_frame_is_cut_and_reported(tmp_path: Path, last: str) -> None:
    built = build(tmp_path / "orig.db", last)
    start, end = frame_spans(built.data)[-1]
    db = tmp_path / "cut.db"
    for cut in range(start + 1, end):
        db.write_bytes(built.data[:cut])
        with MnemoClient(db, AGENT, durability="none") as c:
            assert len(c.recovery) == 1, (cut, c.recovery)
            assert str(start) in c.recovery[0], (cut, c.recovery)
            assert db.stat().st_size == start, f"cut at {cut}: not truncated to the frame start {start}"
            assert c.head == built.head_before_last
            assert records(c) == built.before_last, f"cut at {cut}"
            if cut % 23 == 0:
                assert c.verify().ok
        assert db.read_bytes() == built.data[:start]
    with MnemoClient(db, AGENT, durability="none") as c:
        assert c.recovery == []
        rec = c.remember("after the cut")
        assert rec.seq == built.head_before_last[0] + 1
    assert read_frames(db)[-1].offset == start


def test_a_torn_frame_whose_content_holds_a_whole_frame_is_still_a_torn_tail(tmp_path: Path) -> None:
    """Content is the caller's: it may hold valid Mnemo frames (say, a backup of another db). A crash
    while writing it must still leave a db that opens, with the torn write cut."""
    inner = tmp_path / "inner.db"
    with MnemoClient(inner, AGENT, durability="none") as c:
        c.remember("a record of another db")
    blob = inner.read_bytes() + b"\x00" * 64
    db = tmp_path / "outer.db"
    with MnemoClient(db, AGENT, durability="none") as c:
        first = c.remember("before")
        head = c.head
        c.remember(blob, tags=["backup"])
    data = db.read_bytes()
    start, end = frame_spans(data)[-1]
    inner_end = data.index(blob) + len(blob) - 64
    for cut in (inner_end + 1, inner_end + 40, end - 1):
        db.write_bytes(data[:cut])
        with MnemoClient(db, AGENT, durability="none") as c:
            assert len(c.recovery) == 1 and str(start) in c.recovery[0], c.recovery
            assert records(c) == {first.id: first}
            assert c.head == head
        assert db.read_bytes() == data[:start]


def _carrier_db(path: Path, links: bool, after: int = 0, tx: bool = False
                ) -> tuple[MemoryRecord, tuple[int, str], bytes, int]:
    """A db of one record, then the carrier: a record whose content holds a forged frame (a put into
    agent:alice, every checksum and digest valid) claiming seq 1,000,000, or (`links`) the next seq,
    linked to the head as it was when the record was written; with `tx`, the last of three puts of one
    transaction. Then `after` more records. Returns the first record, the head before the carrier, the
    forged frame and the carrier's frame's first seq."""
    with MnemoClient(path, AGENT, durability="none") as c:
        first = c.remember("before")
        head = c.head
        forged = forged_put_frame(head[0] + 1, bytes.fromhex(head[1])) if links else forged_put_frame(1_000_000)
        with c.transaction():
            for i in range(2 if tx else 0):
                c.remember(f"in the carrier's transaction {i}")
            c.remember(b"a file I was given: " + forged + b" (end of file)", tags=["carrier"])
        for i in range(after):
            c.remember(f"after {i}")
    Path(str(path) + ".snap").unlink(missing_ok=True)
    return first, head, forged, head[0] + 1


@pytest.mark.parametrize("tx", [False, True], ids=["put", "tx"])
@pytest.mark.parametrize("links", [False, True], ids=["seq-1000000", "linked-to-the-head"])
def test_a_torn_write_of_a_record_holding_a_forged_frame_is_cut_as_torn(tmp_path: Path, links: bool,
                                                                        tx: bool) -> None:
    """Content bytes never become chain entries: a crash that tears the write of a record (alone, or the
    last put of a transaction) whose content holds a forged frame, wherever it cuts after that frame (at
    its very end too, so that the forged frame ends where the file does), leaves a torn write. A reader
    stops before it, verify calls it a torn tail, and the next writer cuts it: the records before it
    intact, the forged put nowhere."""
    db = tmp_path / "db"
    first, head, forged, _seq = _carrier_db(db, links, tx=tx)
    data = db.read_bytes()
    start, end = frame_spans(data)[-1]
    forged_end = data.index(forged, start) + len(forged)
    for cut in (forged_end, forged_end + 1, end - 1):
        db.write_bytes(data[:cut])
        assert [p.kind for p in verify_db(db).problems] == ["torn-tail"], cut
        with MnemoClient(db, AGENT, readonly=True) as r:
            assert records(r) == {first.id: first} and r.head == head
        assert db.read_bytes() == data[:cut]
        with MnemoClient(db, AGENT, durability="none") as c:
            assert c.recovery == [
                f"cut a torn last frame at offset {start} ({cut - start} bytes): file ends inside a frame"]
            assert records(c) == {first.id: first} and c.head == head
            assert c.verify().ok
        assert db.read_bytes() == data[:start]


@pytest.mark.parametrize("links", [False, True], ids=["seq-1000000", "linked-to-the-head"])
def test_damage_to_a_record_holding_a_forged_frame_is_still_damage(tmp_path: Path, links: bool) -> None:
    """Real damage stays damage beside a forged frame: the frame holding it, its entries length raised
    past the end of the file, with the chain's frames after it (found by the link to its own entries,
    or, its entry damaged too, as a run of linked frames to the end of the file); and the same frame
    last, whole, its payloads length raised, with or without a torn write after it."""
    db = tmp_path / "db"
    _first, _head, _forged, seq = _carrier_db(db, links, after=3)
    data = db.read_bytes()
    frames = read_frames(db)
    carrier = next(f for f in frames if f.entries[0].seq == seq)
    at = carrier.offset

    def raised(data: bytes, field: int) -> bytes:
        return data[:at + field] + (len(data) + 1000).to_bytes(4, "big") + data[at + field + 4:]

    follow, whole = "; valid frames follow it", ": the whole frame is there, with damaged length fields"
    cases = [
        (raised(data, 16), follow),
        (flip(raised(data, 16), at + FRAME_HEADER.size + 8, 0x01), follow),  # its entry no longer decodes
        (raised(data[:carrier.end], 20), whole),
        (raised(data[:carrier.end + 30], 20), whole),  # the next frame torn
    ]
    for damaged, why in cases:
        db.write_bytes(damaged)
        for readonly in (False, True):
            with pytest.raises(IntegrityError) as exc:
                MnemoClient(db, AGENT, readonly=readonly).close()
            assert str(exc.value) == f"{db}: damaged frame at offset {at} (file ends inside a frame){why}"
            assert exc.value.offset == at
            assert db.read_bytes() == damaged


def test_a_log_ending_at_a_frame_boundary_needs_no_repair(tmp_path: Path) -> None:
    built = build(tmp_path / "orig.db", "put")
    start, _end = frame_spans(built.data)[-1]
    db = tmp_path / "short.db"
    db.write_bytes(built.data[:start])
    with MnemoClient(db, AGENT) as c:
        assert c.recovery == []
        assert records(c) == built.before_last
    assert db.read_bytes() == built.data[:start]


@pytest.mark.parametrize("last", ["put", "tx"])
def test_a_damaged_complete_last_frame_is_refused_never_cut(tmp_path: Path, last: str) -> None:
    """Every single-byte change in a complete last frame (which an fsync may have acknowledged): open
    refuses with IntegrityError naming an offset inside the frame and leaves the file as it is; the
    frame is never cut as a torn write, whatever byte changed (its length fields included)."""
    built = build(tmp_path / "orig.db", last)
    frame = read_frames(tmp_path / "orig.db")[-1]
    start, end = frame.offset, frame.end
    db = tmp_path / "bad.db"
    for pos in range(start, end):
        damaged = flip(built.data, pos, 0x01 if pos % 2 else 0x80)
        db.write_bytes(damaged)
        with pytest.raises(IntegrityError) as exc:
            MnemoClient(db, AGENT, durability="none").close()
        assert exc.value.offset is not None and start <= exc.value.offset < end, (pos, exc.value.offset)
        assert db.read_bytes() == damaged, f"byte {pos}: a refused open changed the file"
        with pytest.raises(IntegrityError):  # a reader refuses it too, rather than stopping before it
            MnemoClient(db, AGENT, readonly=True).close()


def test_a_damaged_last_forget_frame_is_refused_not_cut(tmp_path: Path) -> None:
    """A forget frame is durable before any payload is erased, so a damaged forget frame whose records'
    payloads are already zero cannot be a torn write: cutting it would lose the forget entry and leave
    erased payloads of live records. Open must refuse and leave the file as it is."""
    built = build(tmp_path / "orig.db", "forget")
    frame = read_frames(tmp_path / "orig.db")[-1]
    db = tmp_path / "bad.db"
    for pos in (frame.offset, frame.offset + FRAME_HEADER.size + 6, frame.end - 1):
        damaged = flip(built.data, pos, 0x01)
        db.write_bytes(damaged)
        with pytest.raises(IntegrityError) as exc:
            MnemoClient(db, AGENT).close()
        assert db.read_bytes() == damaged, f"byte {pos}: the refused open cut the log"
        assert exc.value.offset == frame.offset, (pos, str(exc.value))


def test_an_interrupted_erasure_is_completed_on_open(tmp_path: Path) -> None:
    db = tmp_path / "db"
    with MnemoClient(db, AGENT, durability="none") as c:
        keep = c.remember("keep me", tags=["k"])
        gone = c.remember("SECRET-7731", tags=["g"])
        c.update(gone.id, content="SECRET-7732")
        before_forget = db.read_bytes()
        c.forget(gone.id)
    erased = db.read_bytes()
    assert b"SECRET-77" not in erased
    # as if the crash came after the forget frame was durable and before the zeros were written
    restored = before_forget + erased[len(before_forget) :]
    db.write_bytes(restored)
    Path(str(db) + ".snap").unlink(missing_ok=True)
    with MnemoClient(db, AGENT) as c:
        assert any("erasure" in note for note in c.recovery), c.recovery
        assert records(c) == {keep.id: keep}
    assert db.read_bytes() == erased
    assert verify_db(db).ok


@pytest.mark.parametrize("cuts", [[1], [7, 24, 40], [-1]])
def test_a_reader_stops_before_a_torn_tail_and_leaves_it(tmp_path: Path, cuts: list[int]) -> None:
    built = build(tmp_path / "orig.db", "tx")
    start, end = frame_spans(built.data)[-1]
    db = tmp_path / "torn.db"
    for k in cuts:
        cut = start + k if k > 0 else end + k
        db.write_bytes(built.data[:cut])
        with MnemoClient(db, AGENT, readonly=True) as r:
            assert records(r) == built.before_last
            assert r.head == built.head_before_last
        assert db.read_bytes() == built.data[:cut], "a read-only open changed the file"


# -- damage before the last frame --------------------------------------------------------------------


@pytest.mark.parametrize("which", [0, 1, -3, -2])
def test_a_changed_byte_in_an_earlier_frame_is_refused_with_its_offset(tmp_path: Path, which: int) -> None:
    built = build(tmp_path / "orig.db", "tx")
    frames = read_frames(tmp_path / "orig.db")
    frame = frames[which]
    assert frame is not frames[-1]
    slot_bytes = {p for s in frame.slots for p in range(s.offset, s.offset + s.length)}
    db = tmp_path / "bad.db"
    missed: list[str] = []
    for pos in range(frame.offset, frame.end):
        for mask in (0x01, 0x80):
            damaged = flip(built.data, pos, mask)
            db.write_bytes(damaged)
            try:
                with MnemoClient(db, AGENT, durability="none") as c:
                    missed.append(f"byte {pos} ^ {mask:#x}: opened, recovery={c.recovery}")
                continue
            except IntegrityError as exc:
                if pos in slot_bytes:
                    ok = exc.offset is not None and frame.offset <= exc.offset < frame.end
                else:
                    ok = exc.offset == frame.offset
                if not ok or str(exc.offset) not in str(exc):
                    missed.append(f"byte {pos} ^ {mask:#x}: offset {exc.offset}, message {exc}")
            assert db.read_bytes() == damaged, f"byte {pos}: a refused open changed the file"
    assert not missed, f"frame at {frame.offset}..{frame.end}:\n" + "\n".join(missed[:20])


def test_a_changed_byte_in_the_file_header_is_refused(tmp_path: Path) -> None:
    built = build(tmp_path / "orig.db", "put")
    db = tmp_path / "bad.db"
    for pos in range(HEADER_SIZE):
        damaged = flip(built.data, pos, 0x10)
        db.write_bytes(damaged)
        with pytest.raises(IntegrityError) as exc:
            MnemoClient(db, AGENT).close()
        assert exc.value.offset == 0, pos
        assert db.read_bytes() == damaged


def test_a_length_field_pointing_past_the_end_is_not_mistaken_for_a_torn_tail(tmp_path: Path) -> None:
    """An earlier frame whose length now runs past the end of the file must not make the writer cut
    every frame after it as if it were a torn write."""
    built = build(tmp_path / "orig.db", "put")
    frames = read_frames(tmp_path / "orig.db")
    target = frames[2]
    elen_at = target.offset + 16  # magic 4 | count 4 | first_seq 8 | entries_len 4 | payloads_len 4
    for field_at in (elen_at, elen_at + 4):
        for byte in range(4):
            damaged = flip(built.data, field_at + byte, 0x40)
            db = tmp_path / f"len{field_at}-{byte}.db"
            db.write_bytes(damaged)
            with pytest.raises(IntegrityError) as exc:
                MnemoClient(db, AGENT).close()
            assert exc.value.offset == target.offset
            assert db.read_bytes() == damaged


# -- verification of every single-byte change --------------------------------------------------------


def rich_db(path: Path) -> bytes:
    with MnemoClient(path, AGENT, durability="none") as c:
        ids = [c.remember(f"memory {i} " + "é" * i, tags=[f"t{i % 3}", "all"], metadata={"i": i}).id
               for i in range(12)]
        c.remember(bytes(range(40)), tags=["bin"])
        for rid in ids[:4]:
            c.update(rid, content="changed", metadata={"v": 2})
        with c.transaction():
            c.remember("in a transaction", tags=["tx"])
            c.update(ids[5], tags=["tx", "moved"])
        c.forget(ids[1:3], reason="asked")
        c.forget_where(tags=["t0"])
        c.remember("after the forgets")
    return path.read_bytes()


def test_verify_reports_every_single_byte_change(tmp_path: Path) -> None:
    orig = tmp_path / "orig.db"
    data = rich_db(orig)
    report = verify_db(orig)
    assert report.ok and report.problems == (), report.problems
    assert len(data) > 2000
    rng = random.Random(8675309)
    copy = tmp_path / "copy.db"
    missed = []
    for pos in rng.sample(range(len(data)), 200):
        damaged = flip(data, pos, rng.randrange(1, 256))
        copy.write_bytes(damaged)
        report = verify_db(copy)
        if report.ok or not report.problems:
            missed.append(pos)
        assert copy.read_bytes() == damaged, "verify changed the file"
    assert not missed, f"changes at these offsets went unreported: {sorted(missed)}"


def test_verify_reports_every_damaged_frame_not_only_the_first(tmp_path: Path) -> None:
    orig = tmp_path / "orig.db"
    data = rich_db(orig)
    frames = read_frames(orig)
    targets = [frames[2], frames[6], frames[-3]]
    damaged = data
    for f in targets:  # inside the entry section: the frame's length stays readable
        damaged = flip(damaged, f.offset + FRAME_HEADER.size + 10, 0x01)
    copy = tmp_path / "copy.db"
    copy.write_bytes(damaged)
    report = verify_db(copy)
    assert not report.ok
    offsets = {p.offset for p in report.problems}
    assert {f.offset for f in targets} <= offsets, report.problems


def test_verify_reports_a_torn_tail(tmp_path: Path) -> None:
    orig = tmp_path / "orig.db"
    data = rich_db(orig)
    start, end = frame_spans(data)[-1]
    copy = tmp_path / "copy.db"
    for cut in (start + 1, start + FRAME_HEADER.size, end - TRAILER.size, end - 1):
        copy.write_bytes(data[:cut])
        report = verify_db(copy)
        assert not report.ok and report.problems, cut


def test_client_verify_sees_damage_made_after_open(tmp_path: Path) -> None:
    db = tmp_path / "db"
    data = rich_db(db)
    frames = read_frames(db)
    with MnemoClient(db, AGENT, durability="none") as c:
        assert c.verify().ok
        pos = frames[3].offset + FRAME_HEADER.size + 5
        with open(db, "r+b") as f:
            f.seek(pos)
            f.write(bytes([data[pos] ^ 0x04]))
        report = c.verify()
        assert not report.ok
        assert frames[3].offset in {p.offset for p in report.problems}


def test_open_with_a_snapshot_still_reads_a_damaged_tail(tmp_path: Path) -> None:
    """Damage after the snapshot's offset is found by an open that uses the snapshot."""
    db = tmp_path / "db"
    rich_db(db)
    snap = Path(str(db) + ".snap").read_bytes()
    with MnemoClient(db, AGENT, durability="none") as c:
        for i in range(3):
            c.remember(f"tail {i}")
    Path(str(db) + ".snap").write_bytes(snap)
    frames = read_frames(db)
    target = frames[-2]
    data = db.read_bytes()
    damaged = flip(data, target.offset + FRAME_HEADER.size + 3, 0x02)
    db.write_bytes(damaged)
    with pytest.raises(IntegrityError) as exc:
        MnemoClient(db, AGENT).close()
    assert exc.value.offset == target.offset
    assert db.read_bytes() == damaged


def test_a_copy_of_the_damaged_db_is_untouched_by_a_failed_open(tmp_path: Path) -> None:
    db = tmp_path / "db"
    data = rich_db(db)
    frames = read_frames(db)
    damaged = flip(data, frames[1].offset + 2, 0xFF)
    db.write_bytes(damaged)
    Path(str(db) + ".snap").unlink()
    keep = tmp_path / "keep"
    shutil.copy(db, keep)
    for readonly in (False, True):
        with pytest.raises(IntegrityError):
            MnemoClient(db, AGENT, readonly=readonly).close()
    assert db.read_bytes() == keep.read_bytes()
    assert not Path(str(db) + ".erase").exists()


def test_damage_under_a_snapshot_is_found_by_verify(tmp_path: Path) -> None:
    """An open with a valid snapshot reads only the tail; verify reads everything."""
    db = tmp_path / "db"
    data = rich_db(db)
    frames = read_frames(db)
    db.write_bytes(flip(data, frames[2].offset + FRAME_HEADER.size + 1, 0x08))
    with MnemoClient(db, AGENT, readonly=True) as c:
        report = c.verify()
    assert not report.ok and frames[2].offset in {p.offset for p in report.problems}


# -- a crash during a forget: every state it can leave on disk -------------------------------------------
#
# A forget writes its frame and fsyncs it, then zeroes the slots of the versions it drops and fsyncs
# them, and appends nothing before that second fsync (docs/FORMAT.md §3, Erasure). Until an fsync
# returns, any part of what was written may or may not be on disk, in any order: a prefix of the frame,
# and each slot's zeros in any subset of its bytes. Every such state must open to what the docs promise.

ZEROED = {  # what of a slot's zeros reached the disk
    "none": lambda n: (0, 0),
    "all": lambda n: (0, n),
    "front": lambda n: (0, n // 2),
    "back": lambda n: (n // 2, n),
    "middle": lambda n: (n // 3, 2 * n // 3),
}


@dataclass
class Forgetting:
    before: bytes  # the log before the forget
    erased: bytes  # the log after it returned
    slots: list[tuple[int, int]]  # the slots it zeroed
    keep: dict[str, MemoryRecord]
    live_before: dict[str, MemoryRecord]


def forgetting(tmp_path: Path) -> Forgetting:
    db = tmp_path / "orig.db"
    with MnemoClient(db, AGENT, durability="none") as c:
        keep = c.remember("keep me", tags=["k"])
        gone = c.remember("SECRET-7731 " * 9, tags=["g"])
        c.update(gone.id, content="SECRET-7732 " * 7)
        other = c.remember(b"SECRET-7733 binary", tags=["g2"])
        live_before = records(c)
        before = db.read_bytes()
        c.forget([gone.id, other.id])
    erased = db.read_bytes()
    assert b"SECRET-77" not in erased and erased[: len(before)] != before
    changed = [i for i in range(len(before)) if before[i] != erased[i]]
    slots: list[tuple[int, int]] = []
    for i in changed:  # the runs of changed bytes, one per slot (slots of different frames never touch)
        if slots and slots[-1][0] + slots[-1][1] >= i:
            slots[-1] = (slots[-1][0], i + 1 - slots[-1][0])
        else:
            slots.append((i, 1))
    from helpers.frames import read_frames as frames_of

    slot_set = {(s.offset, s.length) for f in frames_of(db) for s in f.slots if s.length}
    slots = [next((o, n) for o, n in slot_set if o <= off < o + n) for off, _ in slots]
    slots = sorted(set(slots))
    assert len(slots) == 3, slots  # two versions of one record, one of the other
    return Forgetting(before, erased, slots, {keep.id: keep}, live_before)


def on_disk(f: Forgetting, zeroed: tuple[str, ...]) -> bytes:
    data = bytearray(f.before + f.erased[len(f.before):])  # the whole forget frame, no zeros yet
    for (off, length), how in zip(f.slots, zeroed, strict=True):
        start, end = ZEROED[how](length)
        data[off + start: off + end] = bytes(end - start)
    return bytes(data)


def test_every_state_a_crash_in_a_forget_leaves_is_recovered(tmp_path: Path) -> None:
    import itertools

    f = forgetting(tmp_path)
    db = tmp_path / "db"
    # the frame not (wholly) durable yet: nothing zeroed; a torn frame is cut, the records stay
    frame = f.erased[len(f.before):]
    for cut in (0, 1, 24, len(frame) // 2, len(frame) - 1):
        db.write_bytes(f.before + frame[:cut])
        with MnemoClient(db, AGENT) as c:
            assert records(c) == f.live_before
        assert db.read_bytes() == f.before
    # the frame durable, each slot's zeros landed in any part
    for zeroed in itertools.product(ZEROED, repeat=3):
        data = on_disk(f, zeroed)
        db.write_bytes(data)
        report = verify_db(db)
        assert report.ok, (zeroed, report.problems)
        with MnemoClient(db, AGENT, readonly=True) as r:  # a reader hides them, never erases
            assert records(r) == f.keep, zeroed
        assert db.read_bytes() == data
        with MnemoClient(db, AGENT) as c:
            assert records(c) == f.keep, zeroed
            left = sum(z != "all" for z in zeroed)
            assert c.recovery == ([f"completed an interrupted erasure of {left} payload slots"] if left else []), (
                zeroed, c.recovery)
        assert db.read_bytes() == f.erased, zeroed  # every forgotten byte gone, nothing else changed
        assert verify_db(db).ok
        Path(str(db) + ".snap").unlink(missing_ok=True)


def test_a_part_zeroed_slot_with_a_frame_after_its_forget_is_damage(tmp_path: Path) -> None:
    """Nothing is appended after a forget until its zeros are fsynced: a slot part-way zeroed with any
    frame after its forget is damage, refused by open with its offset and reported by verify. A slot
    whose zeros never landed at all is an erasure still to do, whatever follows."""
    f = forgetting(tmp_path)
    src = tmp_path / "src.db"
    src.write_bytes(f.erased)
    with MnemoClient(src, AGENT, durability="none") as c:
        c.remember("after the forget")
    appended = src.read_bytes()[len(f.erased):]
    db = tmp_path / "db"
    for how in ("front", "back", "middle"):
        data = on_disk(f, ("all", how, "all")) + appended
        db.write_bytes(data)
        off = f.slots[1][0]
        report = verify_db(db)
        assert [(p.kind, p.offset) for p in report.problems] == [("slot", off)], report.problems
        for readonly in (True, False):
            with pytest.raises(IntegrityError) as exc:
                MnemoClient(db, AGENT, readonly=readonly).close()
            assert str(exc.value) == f"{db}: payload slot damaged at offset {off}"
            assert db.read_bytes() == data
    data = on_disk(f, ("all", "none", "all")) + appended
    db.write_bytes(data)
    with MnemoClient(db, AGENT) as c:
        assert len(records(c)) == 2
        assert c.recovery == ["completed an interrupted erasure of 1 payload slots"]
    assert b"SECRET-77" not in db.read_bytes()
    assert verify_db(db).ok


def test_an_open_zeroes_again_the_slots_the_last_frames_forget_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slots that read as zeros may hold zeros in the page cache only (their writer was killed before
    their fsync, or the fsync failed and the kernel dropped the pages' dirty state): a writer that opens
    a log ending with a forget writes them again and fsyncs them before it appends anything. Only that
    forget's: the slots of earlier forgets were fsynced before the frames after them were appended."""
    import mnemo.storage.file.compaction as engine

    f = forgetting(tmp_path)
    db = tmp_path / "db"
    db.write_bytes(f.erased)
    events: list[tuple[str, int, int]] = []
    real_write_all, real_sync = engine.write_all, engine.sync

    def write_all(fd: int, data: bytes, offset: int) -> None:
        events.append(("zeros" if not any(data) else "bytes", offset, len(data)))
        real_write_all(fd, data, offset)

    def sync(fd: int) -> None:
        events.append(("sync", 0, 0))
        real_sync(fd)

    monkeypatch.setattr(engine, "write_all", write_all)
    monkeypatch.setattr(engine, "sync", sync)
    with MnemoClient(db, AGENT) as c:
        assert c.recovery == []  # a precaution, not a recovery
        zeroed = sorted((off, n) for kind, off, n in events if kind == "zeros")
        assert [e[0] for e in events] == ["zeros"] * len(zeroed) + ["sync"]
        # the runs of the three slots (two of them back to back, in one frame, may be one write)
        covered = {i for off, n in zeroed for i in range(off, off + n)}
        assert covered == {i for off, n in f.slots for i in range(off, off + n)}
        events.clear()
        c.remember("appended after the forget")
    assert db.read_bytes()[: len(f.erased)] == f.erased
    Path(str(db) + ".snap").unlink()
    events.clear()
    with MnemoClient(db, AGENT) as c:  # the log no longer ends with that forget: nothing is written
        assert c.recovery == []
    assert events == []


def test_a_client_catching_up_with_a_forget_leaves_the_snapshot_written_since(tmp_path: Path) -> None:
    """A client that reads the log's last frame, a forget, from another client zeroes its slots again (a
    precaution: they read as zeros already), and leaves every file as it was: the snapshot written after
    that forget holds nothing it dropped. So a refused forget by that client changes no byte on disk."""
    db = tmp_path / "db"
    owner = MnemoClient(db, AGENT)
    other = MnemoClient(db, "ann")  # open before the forget: it catches up with it later
    forgotten = owner.remember("forgotten words", tags=["t0"])
    kept = owner.remember("kept words")
    owner.forget(forgotten.id)
    owner.close()  # writes the snapshot, caught up with the forget
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert str(db.name) + ".snap" in files
    with pytest.raises(NotFound):
        other.forget(kept.id)  # ann may not read it: refused, after catching up with the forget
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files
    other.close()
