"""The log's framing against the bytes docs/FORMAT.md §2-§3 documents: the file header and a frame are
built here from the document alone (struct and zlib, nothing of the engine's) and must equal what the
engine writes; and every rule a reader checks is broken once in a frame whose checksum still holds,
which must be refused as the damage it is, with the error naming the frame's offset. A database
whose log holds such a frame fails to open, and its file is left as it was."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from helpers.frames import frame_spans, read_frames

from mnemo import MnemoClient
from mnemo.chain.codec import ZERO_HASH, make_entry
from mnemo.errors import IntegrityError
from mnemo.storage.file import framing
from mnemo.storage.file.framing import (
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

DB_ID = bytes(range(16))
AT = 32  # the offset of the first frame in a log


def crc(data: bytes) -> bytes:
    return struct.pack(">I", zlib.crc32(data))


def doc_header(db_id: bytes, version: int = 1, size: int = 32) -> bytes:
    """FORMAT.md §2: magic, version u16, header size u16, db_id, crc32 of bytes 0..27."""
    head = b"MNEMOLOG" + struct.pack(">HH", version, size) + db_id
    return head + crc(head)


def table(*items: tuple[bytes, int]) -> bytes:
    """An entry section: for each (entry bytes, slot_len), `entry_len u32 | slot_len u32 | entry bytes`."""
    return b"".join(struct.pack(">II", len(raw), slot_len) + raw for raw, slot_len in items)


def doc_frame(first_seq: int, section: bytes, slots: bytes, count: int, *, elen: int | None = None,
              plen: int | None = None, end: bytes = b"MNFE") -> bytes:
    """FORMAT.md §3, with any header field overridden; the checksum is always made to hold."""
    head = b"MNFR" + struct.pack(">IQII", count, first_seq, len(section) if elen is None else elen,
                                 len(slots) if plen is None else plen)
    return head + section + slots + crc(head + section) + end


def frame_of(first_seq: int, entries: list[tuple[bytes, bytes]], **fields: int) -> bytes:
    """A well-formed frame of (entry bytes, slot bytes), some header fields overridden."""
    section = table(*[(raw, len(slot)) for raw, slot in entries])
    count = fields.pop("count", len(entries))
    return doc_frame(first_seq, section, b"".join(slot for _raw, slot in entries), count, **fields)


def doc_slot(payload: bytes) -> bytes:
    return crc(payload) + payload


def entry(seq: int, op: str = "grant") -> bytes:
    body = {"perms": ["read"], "principal": "bob", "scope": "team:a"}
    return make_entry(seq, 1_700_000_000_000_000_000 + seq, ZERO_HASH, op, "owner", body).raw


# -- the bytes written are the bytes documented ----------------------------------------------------------


def test_the_file_header_is_the_documented_32_bytes() -> None:
    assert framing.HEADER_SIZE == 32 and framing.FILE_MAGIC == b"MNEMOLOG" and framing.FILE_VERSION == 1
    header = encode_file_header(DB_ID)
    assert header == doc_header(DB_ID)
    assert header[8:12] == b"\x00\x01\x00\x20"
    assert decode_file_header(header) == DB_ID


def test_a_frame_is_the_documented_bytes() -> None:
    assert framing.FRAME_MAGIC == b"MNFR" and framing.FRAME_END == b"MNFE"
    assert framing.FRAME_HEADER.size == 24 and framing.TRAILER.size == 8 and framing.FRAME_OVERHEAD == 32
    e0, e1, e2 = entry(7), entry(8), entry(9)
    p0, p2 = b"payload zero", b"\x00\x01two"
    frame, positions = encode_frame_slots([(e0, p0), (e1, None), (e2, p2)])
    assert frame == frame_of(7, [(e0, doc_slot(p0)), (e1, b""), (e2, doc_slot(p2))])
    assert encode_frame([(e0, p0), (e1, None), (e2, p2)]) == frame
    assert encode_frame([(e0, p0), (e1, None), (e2, p2)], first_seq=7) == frame
    section = 3 * 8 + len(e0) + len(e1) + len(e2)
    assert positions == [(24 + section, 4 + len(p0)), (24 + section + 4 + len(p0), 0),
                         (24 + section + 4 + len(p0), 4 + len(p2))]
    assert frame_length(frame, 0, AT) == len(frame) == 32 + section + 8 + len(p0) + len(p2)
    with pytest.raises(ValueError, match="^a frame holds at least one entry$"):
        encode_frame([])


def test_a_new_database_is_the_documented_header_and_frames(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with MnemoClient(path, "owner", durability="none") as c:
        r = c.remember("hello", tags=["t"])
        with c.transaction():
            c.remember("one")
            c.remember("two")
    data = path.read_bytes()
    frames = read_frames(path)
    genesis = frames[0].entries[0]
    assert data[:32] == doc_header(genesis.body["db_id"])
    spans = frame_spans(data)
    assert spans[0][0] == 32 and [len(f.entries) for f in frames] == [1, 1, 2]
    for (start, end), frame in zip(spans, frames, strict=True):
        raw = data[start:end]
        slots = [data[s.offset:s.offset + s.length] for s in frame.slots]
        assert raw == frame_of(frame.entries[0].seq, [(e.raw, s) for e, s in zip(frame.entries, slots, strict=True)])
    (put_slot,) = frames[1].slots
    assert put_slot.state == "ok" and frames[1].entries[0].body["id"] == r.id
    assert frames[0].slots == (Slot(32 + 24 + 8 + len(genesis.raw), 0, "none"),)


# -- the file header -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("header", "message"), [
    (doc_header(DB_ID)[:31], "file is shorter than a Mnemo header"),
    (b"MNEMOLOX" + doc_header(DB_ID)[8:], "not a Mnemo log (bad magic)"),
    (doc_header(DB_ID)[:31] + b"\x00", "file header checksum mismatch"),
    (doc_header(DB_ID, version=2), "unsupported log format version 2"),
    (doc_header(DB_ID, version=0), "unsupported log format version 0"),
    (doc_header(DB_ID, size=33), "unsupported log format version 1"),
    (doc_header(DB_ID, size=31), "unsupported log format version 1"),
])
def test_a_bad_file_header_is_refused(header: bytes, message: str) -> None:
    with pytest.raises(HeaderError) as exc:
        decode_file_header(header)
    assert str(exc.value) == message


def test_the_header_is_the_first_32_bytes_of_a_longer_buffer() -> None:
    """The header is read from the start of whatever follows it: the bytes after byte 32 are not its own."""
    after = frame_of(0, [(entry(0), b"")])
    assert decode_file_header(doc_header(DB_ID) + after) == DB_ID
    assert decode_file_header(doc_header(DB_ID) + b"\x00") == DB_ID
    for header, message in [(doc_header(DB_ID, version=2), "unsupported log format version 2"),
                            (doc_header(DB_ID, size=64), "unsupported log format version 1"),
                            (doc_header(DB_ID)[:31] + b"\x00", "file header checksum mismatch")]:
        with pytest.raises(HeaderError) as exc:
            decode_file_header(header + bytes(32))
        assert str(exc.value) == message


def test_a_header_of_another_version_fails_the_open_and_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "db"
    MnemoClient(path, "owner", durability="none").close()
    Path(str(path) + ".snap").unlink(missing_ok=True)
    data = path.read_bytes()
    for changed in (doc_header(data[12:28], version=2), doc_header(data[12:28], size=64)):
        path.write_bytes(changed + data[32:])
        with pytest.raises(IntegrityError, match="unsupported log format version"):
            MnemoClient(path, "owner", durability="none")
        assert path.read_bytes() == changed + data[32:]


# -- a frame whose checksum holds, but whose structure does not ------------------------------------------

E0, E1 = entry(0), entry(1)
NOT_AN_ENTRY = b"\x91\x01"  # msgpack [1]


def test_frame_lengths_are_bounded_at_2_gib() -> None:
    assert framing.MAX_FRAME == 2**31
    at_limit = frame_of(0, [(E0, b"")], elen=2**31 - 32 - 100, plen=100)
    assert frame_length(at_limit, 0, AT) == 2**31
    with pytest.raises(FrameError) as exc:
        parse_frame(at_limit, 0, AT)
    assert (exc.value.kind, str(exc.value), exc.value.length) == ("incomplete", "file ends inside a frame", 2**31)
    for elen, plen in ((2**31 - 32 - 100, 101), (2**32 - 1, 0), (16, 2**32 - 1)):
        with pytest.raises(FrameError) as exc:
            frame_length(frame_of(0, [(E0, b"")], elen=elen, plen=plen), 0, AT)
        assert (exc.value.kind, str(exc.value)) == ("bad", "impossible frame lengths at offset 32")


BAD_FRAMES: list[tuple[str, bytes, str]] = [
    ("count 0", frame_of(0, [(E0, b"")], count=0), "impossible frame lengths at offset 32"),
    ("section shorter than its entry headers", doc_frame(0, b"\x00" * 15, b"", 2),
     "impossible frame lengths at offset 32"),
    ("frame magic", b"MNFX" + frame_of(0, [(E0, b"")])[4:], "bad frame magic at offset 32"),
    ("trailer magic", frame_of(0, [(E0, b"")], end=b"MNFX"), "frame checksum mismatch at offset 32"),
    ("a third entry header past the section", doc_frame(0, table((E0, 0), (E1, 0)), b"", 3),
     "entry table overruns frame at offset 32"),
    ("an entry longer than the section", doc_frame(0, struct.pack(">II", len(E0) + 1, 0) + E0, b"", 1),
     "entry lengths overrun frame at offset 32"),
    ("a slot longer than the slot section", doc_frame(0, table((E0, 6)), doc_slot(b"p"), 1),
     "entry lengths overrun frame at offset 32"),
    ("a slot of 4 bytes", frame_of(0, [(E0, b"\x00" * 4)]), "entry lengths overrun frame at offset 32"),
    ("a slot of 1 byte", frame_of(0, [(E0, b"\x00")]), "entry lengths overrun frame at offset 32"),
    ("a byte left in the entry section", doc_frame(0, table((E0, 0)) + b"\x00", b"", 1),
     "frame sections do not add up at offset 32"),
    ("a byte left in the slot section", doc_frame(0, table((E0, 5)), doc_slot(b"p") + b"\x00", 1),
     "frame sections do not add up at offset 32"),
    ("first seq off by one", frame_of(5, [(entry(6), b"")]), "entry seq 6 out of order in frame at 32"),
    ("a gap between entries", frame_of(0, [(E0, b""), (entry(2), b"")]), "entry seq 2 out of order in frame at 32"),
    ("an entry that is not one", frame_of(0, [(E0, b""), (NOT_AN_ENTRY, b"")]),
     "entry 1 of frame at offset 32: entry is not an array of 7 items"),
    ("an empty entry at the end of the section", doc_frame(0, table((E0, 0), (b"", 0)), b"", 2),
     "entry 1 of frame at offset 32: entry is not valid msgpack"),
    ("exactly one empty entry header", doc_frame(0, table((b"", 0)), b"", 1),
     "entry 0 of frame at offset 32: entry is not valid msgpack"),
]


@pytest.mark.parametrize(("frame", "message"), [pytest.param(f, m, id=name) for name, f, m in BAD_FRAMES])
def test_a_frame_broken_under_a_valid_checksum_is_bad(frame: bytes, message: str) -> None:
    with pytest.raises(FrameError) as exc:
        parse_frame(frame, 0, AT)
    assert exc.value.kind == "bad" and exc.value.offset == AT
    assert str(exc.value).startswith(message)


def test_slot_lengths_0_and_5_are_the_smallest_allowed() -> None:
    frame = parse_frame(frame_of(0, [(E0, b""), (E1, doc_slot(b"p"))]), 0, AT)
    assert [s.state for s in frame.slots] == ["none", "ok"]
    assert [s.length for s in frame.slots] == [0, 5]


def test_a_frame_is_read_from_inside_a_buffer_at_its_file_offset() -> None:
    frame_bytes = frame_of(3, [(entry(3), doc_slot(b"abc")), (entry(4), b""), (entry(5), doc_slot(b"q"))])
    buf = b"\xff" * 10 + frame_bytes + b"\xee" * 7
    frame = parse_frame(buf, 10, 1000)
    assert (frame.offset, frame.length, frame.end) == (1000, len(frame_bytes), 1000 + len(frame_bytes))
    assert [e.seq for e in frame.entries] == [3, 4, 5]
    slots_at = 1000 + 24 + len(table((entry(3), 7), (entry(4), 0), (entry(5), 5)))
    assert frame.slots == (Slot(slots_at, 7, "ok"), Slot(slots_at + 7, 0, "none"), Slot(slots_at + 7, 5, "ok"))
    assert frame.slots[0].payload_range() == (slots_at + 4, 3)
    assert buf[slots_at - 1000 + 10 + 4:][:3] == b"abc"
    assert frame_length(buf, 10, 1000) == len(frame_bytes)


def test_a_frame_cut_short_is_incomplete() -> None:
    frame_bytes = frame_of(0, [(E0, doc_slot(b"payload"))])
    assert parse_frame(frame_bytes, 0, AT).length == len(frame_bytes)
    with pytest.raises(FrameError) as exc:
        parse_frame(frame_bytes[:-1], 0, AT)
    assert (exc.value.kind, str(exc.value), exc.value.offset, exc.value.length) == (
        "incomplete", "file ends inside a frame", AT, len(frame_bytes))
    # inside a buffer too: what counts is how much of the buffer follows the frame's start
    for before in (1, 10, len(frame_bytes)):
        with pytest.raises(FrameError) as exc:
            parse_frame(b"\xff" * before + frame_bytes[:-1], before, AT)
        assert (exc.value.kind, str(exc.value), exc.value.offset, exc.value.length) == (
            "incomplete", "file ends inside a frame", AT, len(frame_bytes))
    assert frame_length(frame_bytes[:24], 0, AT) == len(frame_bytes)  # a whole header is enough to size it
    for cut in (0, 1, 23):
        with pytest.raises(FrameError) as exc:
            frame_length(frame_bytes[:cut], 0, AT)
        assert (exc.value.kind, str(exc.value), exc.value.length) == (
            "incomplete", "file ends inside a frame header", None)


@pytest.mark.parametrize(("slot", "state"), [
    (b"", "none"),
    (doc_slot(b"x"), "ok"),
    (b"\x00" * 5, "erased"),
    (b"\x00" * 40, "erased"),
    (b"\x00\x00\x00\x00\x01", "bad"),  # a zero CRC over a payload that is not zero
    (b"\x00\x00\x00\x01\x00", "bad"),
    (crc(b"x")[:3] + bytes([crc(b"x")[3] ^ 1]) + b"x", "bad"),
    (doc_slot(b"xy")[:-1] + b"z", "bad"),
])
def test_a_slot_is_none_ok_erased_or_bad(slot: bytes, state: str) -> None:
    assert slot_state(slot) == state
    assert slot_state(memoryview(slot)) == state


# -- end to end: such a frame in a log fails the open and changes nothing ----------------------------------


def broken_frames(seq: int) -> dict[str, bytes]:
    """Frames of entries that would follow a head at `seq - 1`, each broken under a valid checksum."""
    e = entry(seq)
    return {
        "a slot of 4 bytes": frame_of(seq, [(e, b"\x00" * 4)]),
        "an entry longer than the section": doc_frame(seq, struct.pack(">II", len(e) + 1, 0) + e, b"", 1),
        "a byte left in the slot section": doc_frame(seq, table((e, 5)), doc_slot(b"p") + b"\x00", 1),
        "count 0": frame_of(seq, [(e, b"")], count=0),
        "trailer magic": frame_of(seq, [(e, b"")], end=b"MNFX"),
    }


@pytest.mark.parametrize("broken", sorted(broken_frames(1)))
def test_a_log_holding_a_frame_broken_under_a_valid_checksum_fails_to_open(tmp_path: Path, broken: str) -> None:
    path = tmp_path / "db"
    with MnemoClient(path, "owner", durability="none") as c:
        c.remember("first")
        seq = c.head[0] + 1
    Path(str(path) + ".snap").unlink(missing_ok=True)
    data = path.read_bytes()
    damaged = data + broken_frames(seq)[broken]
    path.write_bytes(damaged)
    for readonly in (False, True):
        with pytest.raises(IntegrityError) as exc:
            MnemoClient(path, "owner", durability="none", readonly=readonly)
        assert f"offset {len(data)}" in str(exc.value)
        assert path.read_bytes() == damaged
