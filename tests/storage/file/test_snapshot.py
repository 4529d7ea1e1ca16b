"""The snapshot container: large byte strings as raw sections after the msgpack header, the main part
sealed by one SHA-256 and recall's text index in a part of its own after it, sealed by its own; damage
to the main part, or a section reference out of range, discards the snapshot, and damage to the text
part refuses that part alone.

The sealed sidecars of a log file, byte by byte: a snapshot is magic, version, the main part's length,
then the main part (header length, msgpack header, raw sections and the SHA-256 of the file up to
there), then its deferred parts; anything short, of another version, mis-sealed or with a section out
of range reads as no snapshot (version 2, the whole body in one part, is still read). The erasure
journal reads as None (none), [] (damaged, of another database, or not a regular file) or its regions.
Sidecars are replaced atomically."""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

import msgpack
import pytest
from helpers.erase_journal import write_erase_journal

from mnemo import MnemoClient
from mnemo.audit import export_audit
from mnemo.chain.codec import packb
from mnemo.storage.file import atomic
from mnemo.storage.file import snapshot as snap
from mnemo.storage.file.snapshot import (
    ERASE_MAGIC,
    SNAP_MAGIC,
    SNAP_VERSION,
    decode_snapshot,
    encode_snapshot,
    read_erase_journal,
    read_snapshot,
    write_atomic,
    write_snapshot,
)
from mnemo.transparency.commands import write_file_atomic


def test_large_byte_strings_become_sections_and_come_back() -> None:
    big, small = bytes(range(256)) * 1024, b"x" * 10
    body = {"a": big, "nested": {"b": big[::-1], "small": small, "view": memoryview(big)[:70_000]}, "n": 3}
    data = encode_snapshot(body)
    header_len = struct.unpack(">I", data[20:24])[0]
    header = data[24 : 24 + header_len]
    assert big not in header and small in header  # the large one is a section, the small one inline
    back = decode_snapshot(data)
    assert back is not None
    assert bytes(back["a"]) == big and bytes(back["nested"]["b"]) == big[::-1]
    assert bytes(back["nested"]["view"]) == big[:70_000]
    assert back["nested"]["small"] == small and back["n"] == 3
    assert decode_snapshot(encode_snapshot(back)) == back  # a decoded body encodes again as it was


def _sealed(header: bytes, sections: bytes) -> bytes:
    return _snapshot(header, sections)


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
    assert decode_snapshot(_snapshot(b"\x80", header_len=1000)) is None


def test_damage_inside_a_section_discards_the_snapshot(tmp_path: Path) -> None:
    """Enough records that the index columns are raw sections; a flipped bit in one is caught by the
    seal, and the next open rebuilds the index from the log."""
    db = tmp_path / "s.db"
    with MnemoClient(db, "a", durability="none") as c, c.transaction():
        ids = [c.remember(f"m{i}", tags=[f"t{i % 5}"]).id for i in range(3000)]
    snap = Path(str(db) + ".snap")
    data = snap.read_bytes()
    header_len = struct.unpack(">I", data[20:24])[0]
    end = 20 + struct.unpack(">Q", data[12:20])[0]  # the main part's end (the text part follows)
    assert end - 24 - header_len - 32 > 100_000, "the columns should be raw sections"
    pos = 24 + header_len + (end - 24 - header_len - 32) // 2  # inside the sections
    snap.write_bytes(data[:pos] + bytes([data[pos] ^ 0x01]) + data[pos + 1 :])
    with MnemoClient(db, "a", durability="none") as c:
        assert not c.stats()["snapshot_used"]
        assert [r.id for r in c.query(tags=["t3"])] == ids[3::5]
    with MnemoClient(db, "a", durability="none", readonly=True) as c:
        assert c.stats()["snapshot_used"]  # rebuilt by the writer's open
        assert c.get(ids[1234]).content == "m1234"


def _seal(data: bytes) -> bytes:
    return data + hashlib.sha256(data).digest()


def _snapshot(header: bytes, sections: bytes = b"", version: int = SNAP_VERSION,
              header_len: int | None = None) -> bytes:
    """A version 3 snapshot of a main part only."""
    n = len(header) if header_len is None else header_len
    main = struct.pack(">I", n) + header + sections
    return _seal(SNAP_MAGIC + struct.pack(">IQ", version, len(main) + 32) + main)


def _snapshot_v2(header: bytes, sections: bytes = b"") -> bytes:
    return _seal(SNAP_MAGIC + struct.pack(">II", 2, len(header)) + header + sections)


def test_the_container_layout() -> None:
    assert (SNAP_MAGIC, SNAP_VERSION, ERASE_MAGIC) == (b"MNEMOSNP", 3, b"MNEMOERS")
    body = {"b": 1, "a": [b"x", "y"]}
    data = encode_snapshot(body)
    header = msgpack.packb(body, use_bin_type=True)  # plain msgpack, keys as given
    assert data == _snapshot(header)
    assert decode_snapshot(data) == {"b": 1, "a": [b"x", "y"]}


def test_byte_strings_from_64_kib_on_are_raw_sections() -> None:
    below, at = b"b" * (2**16 - 1), b"a" * 2**16
    data = encode_snapshot({"below": below, "at": at, "also": at})
    header_len = struct.unpack(">I", data[20:24])[0]
    header = msgpack.unpackb(data[24 : 24 + header_len], raw=False)
    assert header["below"] == below
    assert header["at"] == msgpack.ExtType(1, struct.pack(">QQ", 0, 2**16))
    assert header["also"] == msgpack.ExtType(1, struct.pack(">QQ", 2**16, 2**16))
    assert data[24 + header_len : -32] == at + at
    back = decode_snapshot(data)
    assert back is not None
    assert back["below"] == below and isinstance(back["below"], bytes)
    assert isinstance(back["at"], memoryview) and back["at"] == at and back["also"] == at


def test_a_section_reaching_exactly_the_end_is_read() -> None:
    header = msgpack.packb({"a": msgpack.ExtType(1, struct.pack(">QQ", 4, 6))}, use_bin_type=True)
    body = decode_snapshot(_snapshot(header, b"0123456789"))
    assert body is not None and bytes(body["a"]) == b"456789"
    header = msgpack.packb({"a": msgpack.ExtType(1, struct.pack(">QQ", 4, 7))}, use_bin_type=True)
    assert decode_snapshot(_snapshot(header, b"0123456789")) is None
    header = msgpack.packb({"a": msgpack.ExtType(2, struct.pack(">QQ", 0, 1))}, use_bin_type=True)
    assert decode_snapshot(_snapshot(header, b"0123456789")) is None


def test_a_header_reaching_exactly_the_end_is_read_and_one_byte_more_is_not() -> None:
    header = msgpack.packb({"k": "v"}, use_bin_type=True)
    assert decode_snapshot(_snapshot(header)) == {"k": "v"}
    assert decode_snapshot(_snapshot(header, header_len=len(header) + 1)) is None
    assert decode_snapshot(_snapshot(header, header_len=len(header) - 1)) is None  # truncated msgpack


@pytest.mark.parametrize("version", [1, 2, SNAP_VERSION + 1, 0])
def test_a_snapshot_of_another_version_is_no_snapshot(version: int) -> None:
    header = msgpack.packb({"k": "v"}, use_bin_type=True)
    assert decode_snapshot(_snapshot(header, version=version)) is None


def test_a_version_2_snapshot_is_still_read() -> None:
    """Version 2 held the whole body in one part: a database whose snapshot a release before wrote opens
    from it (its text index loaded with the rest)."""
    header = msgpack.packb({"k": "v", "a": msgpack.ExtType(1, struct.pack(">QQ", 1, 3))}, use_bin_type=True)
    assert decode_snapshot(_snapshot_v2(header, b"0123")) == {"k": "v", "a": b"123"}
    assert decode_snapshot(_snapshot_v2(header, b"0123")[:-1]) is None


def _text_state(size: int, terms: tuple[str, ...] = ("alpha", "beta")) -> dict[str, object]:
    return {"layout": 2, "terms": list(terms), "post_docs": b"\x01" * size}


def test_the_text_index_is_a_part_of_its_own_after_the_main_part(tmp_path: Path) -> None:
    """The index's text state is written after the main part, which names it by where it lies and its
    SHA-256; an open reads the main part only, and the part when it is wanted."""
    body = {"db_id": b"d", "index": {"rows": 2, "text": _text_state(70_000)}}
    data = encode_snapshot(body)
    version, main_len = struct.unpack(">IQ", data[8:20])
    end = 20 + main_len
    assert version == 3 and data[end - 32 : end] == hashlib.sha256(data[: end - 32]).digest()
    part = data[end:]
    assert part[-32:] == hashlib.sha256(part[:-32]).digest()
    assert b"alpha" not in data[:end] and b"alpha" in part
    assert decode_snapshot(data) == {"db_id": b"d", "index": {"rows": 2, "text": _text_state(70_000)}}
    path = str(tmp_path / "x.snap")
    # what lies after the main part is not read by the open: garbage there still opens
    Path(path).write_bytes(data[:end] + b"garbage" * 10)
    opened = snap.open_snapshot(path)
    assert opened is not None
    main, fd, at = opened
    assert fd is not None and at == end
    try:
        ref = main["index"]["text"]["part"]
        assert ref == [0, len(part), hashlib.sha256(part[:-32]).digest()]
        with pytest.raises(ValueError, match="the snapshot's text part is cut short"):
            snap.read_part(fd, at, ref, "text")
    finally:
        os.close(fd)
    Path(path).write_bytes(data)
    opened = snap.open_snapshot(path)
    assert opened is not None and opened[1] is not None
    try:
        assert snap.read_part(opened[1], opened[2], opened[0]["index"]["text"]["part"], "text") == _text_state(70_000)
    finally:
        os.close(opened[1])


def test_a_text_part_sealed_again_but_not_the_one_the_main_part_names_is_refused() -> None:
    data = encode_snapshot({"index": {"text": _text_state(10)}})
    other = encode_snapshot({"index": {"text": _text_state(10, ("alpha", "bet4"))}})
    end = 20 + struct.unpack(">Q", data[12:20])[0]
    other_end = 20 + struct.unpack(">Q", other[12:20])[0]
    swapped = data[:end] + other[other_end:]  # a part that holds its own checksum, of another snapshot
    assert decode_snapshot(swapped) is None
    body = snap._decode_main(swapped)
    assert body is not None
    with pytest.raises(ValueError, match="does not match its checksum"):
        snap.decode_part(body["index"]["text"]["part"], swapped[end:], "text")


def test_a_snapshot_that_is_not_a_map_is_no_snapshot() -> None:
    assert decode_snapshot(_snapshot(msgpack.packb([1, 2]))) is None
    assert decode_snapshot(_snapshot(b"\xc1")) is None


def test_short_or_mis_sealed_bytes_are_no_snapshot() -> None:
    good = encode_snapshot({"k": "v"})
    assert decode_snapshot(good) == {"k": "v"}
    assert decode_snapshot(good[:-1]) is None
    assert decode_snapshot(good[:-1] + bytes([good[-1] ^ 1])) is None
    assert decode_snapshot(b"MNEMOSNX" + good[8:]) is None  # wrong magic
    assert decode_snapshot(_seal(b"MNEMOSNX" + good[8:-32])) is None  # wrong magic, sealed anyway
    assert decode_snapshot(b"") is None
    assert decode_snapshot(SNAP_MAGIC) is None
    for inner in (b"", b"\x00" * 7, struct.pack(">IQ", SNAP_VERSION, 0)[:11]):  # sealed, but too short
        assert decode_snapshot(_seal(SNAP_MAGIC + inner)) is None
    assert decode_snapshot(_snapshot(b"")) is None  # a header of no bytes: no map
    main = struct.pack(">I", 0)
    assert decode_snapshot(_seal(SNAP_MAGIC + struct.pack(">IQ", SNAP_VERSION, 10**6) + main)) is None  # too long


def test_snapshots_round_trip_through_files(tmp_path: Path) -> None:
    path = str(tmp_path / "x.snap")
    assert read_snapshot(path) is None
    write_snapshot(path, {"k": [1, 2], "big": b"z" * 70_000})
    back = read_snapshot(path)
    assert back is not None and back["k"] == [1, 2] and back["big"] == b"z" * 70_000
    assert not os.path.exists(path + ".tmp")
    Path(path).write_bytes(Path(path).read_bytes()[:-1])
    assert read_snapshot(path) is None
    os.unlink(path)
    os.mkdir(path)
    assert read_snapshot(path) is None  # a directory is not a snapshot


def test_a_fifo_in_a_sidecars_place_is_never_read(tmp_path: Path) -> None:
    fifo = str(tmp_path / "x.snap")
    os.mkfifo(fifo)
    assert read_snapshot(fifo) is None  # and does not block
    journal = str(tmp_path / "x.erase")
    os.mkfifo(journal)
    assert read_erase_journal(journal) == []


def test_the_erasure_journal(tmp_path: Path) -> None:
    path = str(tmp_path / "x.erase")
    db_id = b"i" * 16
    assert read_erase_journal(path) is None
    assert read_erase_journal(path, db_id) is None
    write_erase_journal(path, db_id, [(10, 5), (100, 7)])
    data = Path(path).read_bytes()
    assert data == _seal(ERASE_MAGIC + packb({"db_id": db_id, "regions": [(10, 5), (100, 7)]}))
    assert read_erase_journal(path) == [(10, 5), (100, 7)]
    assert read_erase_journal(path, db_id) == [(10, 5), (100, 7)]
    assert read_erase_journal(path, b"j" * 16) == []  # another database's
    Path(path).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert read_erase_journal(path, db_id) == []
    Path(path).write_bytes(data[: len(ERASE_MAGIC) + 31])
    assert read_erase_journal(path, db_id) == []
    Path(path).write_bytes(_seal(b"MNEMOSNP" + data[8:-32]))
    assert read_erase_journal(path, db_id) == []  # a snapshot's magic
    Path(path).write_bytes(_seal(ERASE_MAGIC + packb({"db_id": db_id})))
    assert read_erase_journal(path, db_id) == []  # sealed, but no regions
    Path(path).write_bytes(_seal(ERASE_MAGIC + packb({"db_id": db_id, "regions": [(1, 2, 3)]})))
    assert read_erase_journal(path, db_id) == []
    Path(path).write_bytes(_seal(ERASE_MAGIC + packb({"db_id": db_id, "regions": []})))
    assert read_erase_journal(path, db_id) == []  # an empty journal is an empty list, not None
    os.unlink(path)
    os.symlink(str(tmp_path / "nowhere"), path)
    assert read_erase_journal(path, db_id) == []  # there (a dangling link), but unreadable


def test_an_atomic_write_replaces_the_whole_file(tmp_path: Path) -> None:
    path = str(tmp_path / "side")
    write_atomic(path, b"first version, longer")
    write_atomic(path, b"second", durable=False)
    assert Path(path).read_bytes() == b"second"
    assert sorted(os.listdir(tmp_path)) == ["side"]
    assert os.stat(path).st_mode & 0o777 == 0o644 & ~_umask()


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    path = str(tmp_path / "side")
    write_atomic(path, b"old")

    def full(fd: int, data: bytes, offset: int) -> None:
        os.write(fd, data[:2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic, "write_all", full)
    with pytest.raises(OSError, match="No space"):
        write_atomic(path, b"new bytes")
    assert Path(path).read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["side"]
    snap.remove(str(tmp_path / "absent"))  # removing what is not there is no error


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.fixture
def disk_events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """What whole-file writes do to the disk, in order: each sync (of the file it names), rename and
    sync of a folder."""
    events: list[tuple[str, ...]] = []
    real_replace = os.replace
    monkeypatch.setattr(atomic, "sync", lambda fd: events.append(("sync", os.readlink(f"/proc/self/fd/{fd}"))))
    monkeypatch.setattr(atomic, "fsync_dir", lambda path: events.append(("fsync_dir", path)))

    def replace(src: str, dst: str) -> None:
        events.append(("replace", src, dst))
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)
    return events


def test_a_durable_write_is_on_disk_before_it_returns_and_a_snapshot_is_never_synced(
        tmp_path: Path, disk_events: list[tuple[str, ...]]) -> None:
    """A file written whole (a checkpoint note, an audit export) is synced before the rename, and the
    directory after it. A snapshot only speeds up the next open, so it costs no sync."""
    snapshot = str(tmp_path / "x.snap")
    write_snapshot(snapshot, {"k": 1})
    assert disk_events == [("replace", snapshot + ".tmp", snapshot)]
    disk_events.clear()
    other = str(tmp_path / "other")
    write_atomic(other, b"durable unless told otherwise")
    assert disk_events == [("sync", other + ".tmp"), ("replace", other + ".tmp", other), ("fsync_dir", other)]


def test_maps_keyed_by_integers_come_back() -> None:
    """The index keeps the older versions of a record in a map keyed by row number: a snapshot that read
    such a map back as damaged would cost every open a replay of the whole log."""
    body = {"older": {0: [b"a" * 32], 7: [b"b" * 32, b"c" * 32]}, "tags": {"t": 1}}
    assert decode_snapshot(encode_snapshot(body)) == body


def test_a_reopened_store_with_updated_records_uses_its_snapshot(tmp_path: Path) -> None:
    db = tmp_path / "u.db"
    with MnemoClient(db, "a", durability="none") as c:
        rid = c.remember("v1").id
        c.update(rid, content="v2")
    with MnemoClient(db, "a", readonly=True) as c:
        assert c.stats()["snapshot_used"] is True
        assert [v.content for v in c.history(rid)] == ["v1", "v2"]


def test_an_audit_export_and_a_checkpoint_note_are_synced_before_the_rename_and_the_folder_after(
        tmp_path: Path, disk_events: list[tuple[str, ...]]) -> None:
    """An export or a note handed on as evidence must survive a power loss whole or not at all, like
    the journal: file, rename, folder, in that order. An export takes no lock, so its temp file is named
    for its process."""
    db = str(tmp_path / "m.db")
    with MnemoClient(db, "a") as c:
        c.remember("the content", scope="s")
    out = str(tmp_path / "audit.jsonl")
    disk_events.clear()
    export_audit(db, out)
    tmp = f"{out}.tmp{os.getpid()}"
    assert disk_events == [("sync", tmp), ("replace", tmp, out), ("fsync_dir", out)]
    assert Path(out).read_text(encoding="utf-8").count("\n") == 2
    assert not [name for name in os.listdir(tmp_path) if ".tmp" in name]
    disk_events.clear()
    note = str(tmp_path / "checkpoint.txt")
    write_file_atomic(note, "a note\n")
    assert disk_events == [("sync", note + ".tmp"), ("replace", note + ".tmp", note), ("fsync_dir", note)]
    assert Path(note).read_bytes() == b"a note\n"


def test_a_part_named_and_sealed_but_not_a_text_state_is_refused() -> None:
    """Only a writer can make these (the main part names the part's SHA-256): bytes that are no body, and
    a body of another key, are refused as not decoding, never read as a text index."""
    for packed in (struct.pack(">I", 1) + b"\xc1", snap._pack({"other": 1}), snap._pack({"text": 1, "more": 2})):
        part = bytes(packed) + hashlib.sha256(packed).digest()
        ref = [0, len(part), hashlib.sha256(packed).digest()]
        with pytest.raises(ValueError, match="the snapshot's text part does not decode"):
            snap.decode_part(ref, part, "text")
    packed = snap._pack({"text": {"layout": 2}})
    part = bytes(packed) + hashlib.sha256(packed).digest()
    assert snap.decode_part([0, len(part), hashlib.sha256(packed).digest()], part, "text") == {"layout": 2}
