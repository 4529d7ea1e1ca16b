"""Read a Mnemo log file frame by frame (docs/FORMAT.md §2-§3), independently of the engine."""

from __future__ import annotations

from pathlib import Path

from mnemo.chain.codec import (
    ZERO_HASH,
    Entry,
    encode_put_payload,
    make_entry,
    pack_record_fields,
    payload_digest,
)
from mnemo.storage.file.framing import (
    HEADER_SIZE,
    Frame,
    Slot,
    decode_file_header,
    encode_frame,
    frame_length,
    parse_frame,
)

FORGED_CONTENT = "planted in another record's content"


def frame_spans(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every frame of a well-formed log; asserts the frames tile the file exactly."""
    decode_file_header(data[:HEADER_SIZE])
    spans: list[tuple[int, int]] = []
    pos = HEADER_SIZE
    while pos < len(data):
        n = frame_length(data, pos, pos)
        spans.append((pos, pos + n))
        pos += n
    assert pos == len(data), f"last frame overruns the file: ends at {pos}, file is {len(data)} bytes"
    return spans


def read_frames(path: Path | str) -> list[Frame]:
    data = Path(path).read_bytes()
    return [parse_frame(data, start, start) for start, _end in frame_spans(data)]


def read_entries(path: Path | str) -> list[Entry]:
    return [e for f in read_frames(path) for e in f.entries]


def check_chain(entries: list[Entry]) -> None:
    """Assert seqs run 0, 1, 2, ... and every entry links to the hash of the one before it."""
    prev = b"\x00" * 32
    for i, e in enumerate(entries):
        assert e.seq == i, f"entry {i} has seq {e.seq}"
        assert e.prev == prev, f"entry {i} does not link to entry {i - 1}"
        prev = e.hash


def put_slots(path: Path | str) -> dict[str, tuple[Entry, Slot]]:
    """Each record's last put entry and its payload slot."""
    return {
        e.body["id"]: (e, s) for f in read_frames(path) for e, s in zip(f.entries, f.slots, strict=True)
        if e.op == "put"
    }


def flip_byte(path: Path | str, offset: int) -> None:
    """Damage one byte of the file in place (its lowest bit flipped), as bit rot would."""
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))


def forged_put_frame(seq: int, prev: bytes = ZERO_HASH, *, rid: str = "forged", scope: str = "agent:alice",
                     agent: str = "alice") -> bytes:
    """A well-formed frame of one put of FORGED_CONTENT into `scope` (frame checksum, slot checksum and
    digest all valid), made with the engine's own encoders: what a record's content may hold to pass for
    an entry of the chain."""
    salt, packed = bytes(range(16)), pack_record_fields(FORGED_CONTENT, ["forged"], {})
    body = {"digest": payload_digest(salt, packed), "id": rid, "scope": scope,
            "size": len(FORGED_CONTENT.encode()), "ver": 1}
    entry = make_entry(seq, 1_700_000_000_000_000_000, prev, "put", agent, body)
    return encode_frame([(entry.raw, encode_put_payload(salt, packed))])
