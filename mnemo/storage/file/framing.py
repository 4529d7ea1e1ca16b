"""On-disk framing of the log (docs/FORMAT.md §2–§3): file header, frames, payload slots.

A frame is the unit of atomicity: all of its entries are committed, or none. The frame checksum covers
everything but the payload slots, because erasure overwrites slots in place; each slot carries its own
CRC instead, and an erased slot is all zero bytes.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import NamedTuple

from ..._native import writepath
from ...chain.codec import Entry, EntryDecodeError, decode_entry

FILE_MAGIC = b"MNEMOLOG"
FILE_VERSION = 1
HEADER_SIZE = 32
FRAME_MAGIC = b"MNFR"
FRAME_END = b"MNFE"
FRAME_HEADER = struct.Struct(">4sIQII")  # magic, count, first_seq, entries_len, payloads_len
ENTRY_HEADER = struct.Struct(">II")  # entry_len, slot_len
TRAILER = struct.Struct(">I4s")  # crc32(frame header + entry section), end magic
SLOT_CRC = struct.Struct(">I")
FRAME_OVERHEAD = FRAME_HEADER.size + TRAILER.size
MAX_FRAME = 1 << 31  # a sanity bound: lengths beyond this are damage, not data


def encode_file_header(db_id: bytes) -> bytes:
    head = FILE_MAGIC + struct.pack(">HH", FILE_VERSION, HEADER_SIZE) + db_id
    return head + struct.pack(">I", zlib.crc32(head))


class HeaderError(ValueError):
    pass


def decode_file_header(data: bytes) -> bytes:
    """Return the db_id of a valid file header; raise HeaderError otherwise."""
    if len(data) < HEADER_SIZE:
        raise HeaderError("file is shorter than a Mnemo header")
    if data[:8] != FILE_MAGIC:
        raise HeaderError("not a Mnemo log (bad magic)")
    version, size = struct.unpack(">HH", data[8:12])
    (crc,) = struct.unpack(">I", data[28:32])
    if crc != zlib.crc32(data[:28]):
        raise HeaderError("file header checksum mismatch")
    if version != FILE_VERSION or size != HEADER_SIZE:
        raise HeaderError(f"unsupported log format version {version}")
    return bytes(data[12:28])


def encode_frame(entries: Sequence[tuple[bytes, bytes | None]], first_seq: int | None = None) -> bytes:
    """Frame a list of (entry bytes, payload or None). first_seq defaults to the first entry's seq."""
    return encode_frame_slots(entries, first_seq)[0]


def encode_frame_slots(
    entries: Sequence[tuple[bytes, bytes | None]], first_seq: int | None = None
) -> tuple[bytes, list[tuple[int, int]]]:
    """Encode a frame; also return each entry's slot as (offset within the frame, length). Made by the
    extension mnemo._writepath where it is built (a list of tuples of bytes), else by the twin."""
    if not entries:
        raise ValueError("a frame holds at least one entry")
    if first_seq is None:
        first_seq = decode_entry(entries[0][0]).seq
    if writepath is not None:
        try:
            framed: tuple[bytes, list[tuple[int, int]]] = writepath.frame(entries, first_seq)
            return framed
        except Exception:  # left to the twin, which frames it or says what is wrong
            pass
    return pure_frame_slots(entries, first_seq)


def pure_frame_slots(
    entries: Sequence[tuple[bytes, bytes | None]], first_seq: int
) -> tuple[bytes, list[tuple[int, int]]]:
    """encode_frame_slots's pure-Python twin."""
    entry_parts: list[bytes] = []
    slot_parts: list[bytes] = []
    for raw, payload in entries:
        slot = b"" if payload is None else SLOT_CRC.pack(zlib.crc32(payload)) + payload
        entry_parts.append(ENTRY_HEADER.pack(len(raw), len(slot)))
        entry_parts.append(raw)
        slot_parts.append(slot)
    section = b"".join(entry_parts)
    slots = b"".join(slot_parts)
    head = FRAME_HEADER.pack(FRAME_MAGIC, len(entries), first_seq, len(section), len(slots))
    crc = zlib.crc32(section, zlib.crc32(head))
    positions = []
    pos = FRAME_HEADER.size + len(section)
    for slot in slot_parts:
        positions.append((pos, len(slot)))
        pos += len(slot)
    return head + section + slots + TRAILER.pack(crc, FRAME_END), positions


class Slot(NamedTuple):
    """Where an entry's payload lives in the file, and what state it is in."""

    offset: int  # absolute file offset of the slot (its CRC field)
    length: int  # 0: the entry has no payload
    state: str  # "none" | "ok" | "erased" | "bad"

    def payload_range(self) -> tuple[int, int]:
        return self.offset + SLOT_CRC.size, self.length - SLOT_CRC.size


class Frame(NamedTuple):
    offset: int
    length: int
    entries: tuple[Entry, ...]
    slots: tuple[Slot, ...]

    @property
    def end(self) -> int:
        return self.offset + self.length


class FrameError(ValueError):
    """A frame could not be read. kind: "incomplete" (the file ends inside it) or "bad" (damaged)."""

    def __init__(self, kind: str, message: str, offset: int, length: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.offset = offset
        self.length = length


def frame_length(buf: bytes | memoryview, pos: int, offset: int) -> int:
    """Total length of the frame whose header starts at buf[pos]; FrameError if unreadable."""
    if len(buf) - pos < FRAME_HEADER.size:
        raise FrameError("incomplete", "file ends inside a frame header", offset)
    magic, count, _first, elen, plen = FRAME_HEADER.unpack_from(buf, pos)
    if magic != FRAME_MAGIC:
        raise FrameError("bad", f"bad frame magic at offset {offset}", offset)
    total: int = FRAME_OVERHEAD + elen + plen
    if count == 0 or total > MAX_FRAME or elen < count * ENTRY_HEADER.size:
        raise FrameError("bad", f"impossible frame lengths at offset {offset}", offset)
    return total


def slot_state(data: bytes | memoryview) -> str:
    if len(data) == 0:
        return "none"
    (crc,) = SLOT_CRC.unpack_from(data, 0)
    if crc == 0 and data == bytes(len(data)):  # compared in C; any() would loop over every byte
        return "erased"
    return "ok" if crc == zlib.crc32(data[SLOT_CRC.size :]) else "bad"


def parse_frame(buf: bytes | memoryview, pos: int, offset: int) -> Frame:
    """Parse and check the frame at buf[pos] (file offset `offset`). Raises FrameError.

    Checks the frame CRC, the structure and that each entry decodes; payload slots are classified
    (ok / erased / bad) but a bad slot is left to the caller, which knows whether it was being erased.
    """
    total = frame_length(buf, pos, offset)
    if len(buf) - pos < total:
        raise FrameError("incomplete", "file ends inside a frame", offset, total)
    _magic, count, first_seq, elen, plen = FRAME_HEADER.unpack_from(buf, pos)
    crc_end = pos + FRAME_HEADER.size + elen
    crc, end_magic = TRAILER.unpack_from(buf, crc_end + plen)
    if end_magic != FRAME_END or crc != zlib.crc32(buf[pos:crc_end]):
        raise FrameError("bad", f"frame checksum mismatch at offset {offset}", offset, total)
    entries: list[Entry] = []
    slots: list[Slot] = []
    p = pos + FRAME_HEADER.size
    slot_pos = crc_end
    for i in range(count):
        if p + ENTRY_HEADER.size > crc_end:
            raise FrameError("bad", f"entry table overruns frame at offset {offset}", offset, total)
        rlen, slen = ENTRY_HEADER.unpack_from(buf, p)
        p += ENTRY_HEADER.size
        if p + rlen > crc_end or slot_pos + slen > crc_end + plen or 0 < slen <= SLOT_CRC.size:
            raise FrameError("bad", f"entry lengths overrun frame at offset {offset}", offset, total)
        try:
            entry = decode_entry(bytes(buf[p:p + rlen]))
        except EntryDecodeError as exc:
            raise FrameError("bad", f"entry {i} of frame at offset {offset}: {exc}", offset, total) from None
        if entry.seq != first_seq + i:
            raise FrameError("bad", f"entry seq {entry.seq} out of order in frame at {offset}", offset, total)
        entries.append(entry)
        state = slot_state(buf[slot_pos:slot_pos + slen])
        slots.append(Slot(offset + (slot_pos - pos), slen, state))
        p += rlen
        slot_pos += slen
    if p != crc_end or slot_pos != crc_end + plen:
        raise FrameError("bad", f"frame sections do not add up at offset {offset}", offset, total)
    return Frame(offset, total, tuple(entries), tuple(slots))
