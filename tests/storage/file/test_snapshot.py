"""The snapshot container: large byte strings as raw sections after the msgpack header, all sealed by
one SHA-256; damage anywhere, or a section reference out of range, discards the snapshot."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import msgpack
import pytest

from mnemo import MnemoClient
from mnemo.storage.file.snapshot import SNAP_MAGIC, SNAP_VERSION, decode_snapshot, encode_snapshot


def test_large_byte_strings_become_sections_and_come_back() -> None:
    big, small = bytes(range(256)) * 1024, b"x" * 10
    body = {"a": big, "nested": {"b": big[::-1], "small": small, "view": memoryview(big)[:70_000]}, "n": 3}
    data = encode_snapshot(body)
    header_len = struct.unpack(">I", data[12:16])[0]
    header = data[16 : 16 + header_len]
    assert big not in header and small in header  # the large one is a section, the small one inline
    back = decode_snapshot(data)
    assert back is not None
    assert bytes(back["a"]) == big and bytes(back["nested"]["b"]) == big[::-1]
    assert bytes(back["nested"]["view"]) == big[:70_000]
    assert back["nested"]["small"] == small and back["n"] == 3
    assert decode_snapshot(encode_snapshot(back)) == back  # a decoded body encodes again as it was


def _sealed(header: bytes, sections: bytes) -> bytes:
    data = SNAP_MAGIC + struct.pack(">II", SNAP_VERSION, len(header)) + header + sections
    return data + hashlib.sha256(data).digest()


@pytest.mark.parametrize("ref", [(0, 11), (5, 6), (2**63, 1), (0, 2**64 - 1)])
def test_a_section_reference_out_of_range_is_refused(ref: tuple[int, int]) -> None:
    header = msgpack.packb({"a": msgpack.ExtType(1, struct.pack(">QQ", *ref))}, use_bin_type=True)
    assert decode_snapshot(_sealed(header, b"0123456789")) is None
    ok = msgpack.packb({"a": msgpack.ExtType(1, struct.pack(">QQ", 2, 3))}, use_bin_type=True)
    body = decode_snapshot(_sealed(ok, b"0123456789"))
    assert body is not None and bytes(body["a"]) == b"234"


def test_an_unknown_ext_type_or_a_short_header_is_refused() -> None:
    header = msgpack.packb({"a": msgpack.ExtType(7, b"")}, use_bin_type=True)
    assert decode_snapshot(_sealed(header, b"")) is None
    data = SNAP_MAGIC + struct.pack(">II", SNAP_VERSION, 1000) + b"\x80"
    assert decode_snapshot(data + hashlib.sha256(data).digest()) is None


def test_damage_inside_a_section_discards_the_snapshot(tmp_path: Path) -> None:
    """Enough records that the index columns are raw sections; a flipped bit in one is caught by the
    seal, and the next open rebuilds the index from the log."""
    db = tmp_path / "s.db"
    with MnemoClient(db, "a", durability="none") as c, c.transaction():
        ids = [c.remember(f"m{i}", tags=[f"t{i % 5}"]).id for i in range(3000)]
    snap = Path(str(db) + ".snap")
    data = snap.read_bytes()
    header_len = struct.unpack(">I", data[12:16])[0]
    assert len(data) - 16 - header_len - 32 > 100_000, "the columns should be raw sections"
    pos = 16 + header_len + (len(data) - 16 - header_len - 32) // 2  # inside the sections
    snap.write_bytes(data[:pos] + bytes([data[pos] ^ 0x01]) + data[pos + 1 :])
    with MnemoClient(db, "a", durability="none") as c:
        assert not c.stats()["snapshot_used"]
        assert [r.id for r in c.query(tags=["t3"])] == ids[3::5]
    with MnemoClient(db, "a", durability="none", readonly=True) as c:
        assert c.stats()["snapshot_used"]  # rebuilt by the writer's open
        assert c.get(ids[1234]).content == "m1234"
