"""The file backend's read path in C (mnemo/_readpath.c) against its pure-Python twins: read_served
serves exactly what reads.quick_packed serves from a real log (every version of every record, in frames
of one entry and of several), refuses what the twin refuses (a payload rewritten with its checksum
recomputed, an entry of another record), leaves to the general path a put it does not read (which the
general path then serves or refuses), and raises OSError where os.pread does; find_sorted finds what
index_columns.find_sorted finds. A brief fuzzing run compares them on mutated inputs (the long one is in
tests/soak). Under MNEMO_PURE_PYTHON=1 the C extension is not loaded: the tests that call it are skipped,
and the rest run on the twin."""

from __future__ import annotations

import hashlib
import zlib
from pathlib import Path
from typing import Any

import pytest
from helpers.frames import put_slots
from helpers.native_fuzz import fuzz

from mnemo import IntegrityError, MnemoClient
from mnemo._native import readpath
from mnemo.chain.codec import make_entry, pack_record_fields, payload_digest
from mnemo.storage.file.index_columns import SortedIds, find_sorted
from mnemo.storage.file.reads import quick_packed
from mnemo.storage.types import Rec, Version

OWNER = "owner"
native = pytest.mark.skipif(readpath is None, reason="the C extension is not loaded (MNEMO_PURE_PYTHON or no build)")


def _every_version(client: MnemoClient) -> list[tuple[Rec, Version]]:
    store: Any = client._store
    index = store.index
    return [(rec, v) for row in index.live_rows() for rec in [index.rec_at(row)] for v in rec.versions]


def _log_of_every_kind(db: Path) -> MnemoClient:
    c = MnemoClient(db, OWNER, durability="none")
    c.remember("alone in its frame", tags=["a"])
    c.remember(bytes(range(256)), tags=["bytes"], metadata={"k": [1, 2.5, None]})
    with c.transaction() as tx:
        ids = [tx.remember(f"one of three ✓ {i}", tags=[f"t{i}"]).id for i in range(3)]
    c.update(ids[1], "its second version", tags=["t1", "again"])
    c.remember("x" * 70_000)  # a payload longer than str16's header can say
    return c


@native
def test_the_c_read_path_serves_what_its_twin_serves_from_a_real_log(tmp_path: Path) -> None:
    with _log_of_every_kind(tmp_path / "r.db") as c:
        items = _every_version(c)
        store: Any = c._store
        handle = store._handles.acquire()
        try:
            got = readpath.read_served(handle.fd, items)
            want = quick_packed(items, handle.fd)
        finally:
            store._handles.release(handle)
    assert len(items) == 7  # six records, one of them updated
    assert all(w is not None for w in want)
    assert got == [bytes(w) for w in want if w is not None]


@native
def test_the_c_read_path_refuses_a_payload_rewritten_with_its_checksum_recomputed(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    with _log_of_every_kind(db) as c:
        first = c.query(tags=["a"])[0]
        _, slot = put_slots(db)[first.id]
        data = bytearray(db.read_bytes())
        at = slot.offset + 4 + 16  # the first byte of the packed fields
        data[at + 1] ^= 0x01
        data[slot.offset : slot.offset + 4] = zlib.crc32(data[slot.offset + 4 : slot.offset + slot.length]).to_bytes(
            4, "big")
        db.write_bytes(bytes(data))
        items = [(rec, v) for rec, v in _every_version(c) if rec.id == first.id]
        store: Any = c._store
        handle = store._handles.acquire()
        try:
            assert readpath.read_served(handle.fd, items) == [None] == quick_packed(items, handle.fd)
        finally:
            store._handles.release(handle)
        with pytest.raises(IntegrityError) as info:
            c.get(first.id)
        assert str(info.value) == (f"{db}: the payload at offset {slot.offset} is not served: it does not match "
                                   "the digest its chain entry commits to")


def _put_file(tmp_path: Path, body_extra: dict[str, Any], rec_id: str = "r1") -> tuple[int, list[Any], Any]:
    """A file holding one put's entry and its slot, adjacent; (fd, items, file)."""
    salt, packed = b"s" * 16, pack_record_fields("hello", ["t"], {})
    body = {"digest": payload_digest(salt, packed), "id": rec_id, "scope": "agent:a", "size": 5, "ver": 1,
            **body_extra}
    e = make_entry(3, 1_764_500_000_000_000_000, b"\x11" * 32, "put", "a", body)
    payload = salt + packed
    slot = zlib.crc32(payload).to_bytes(4, "big") + payload
    f = (tmp_path / "one").open("w+b")
    f.write(b"H" * 5 + e.raw + slot)
    f.flush()
    v = Version(1, 3, 0, "a", 5, hashlib.sha256(e.raw).digest(), 5 + len(e.raw), len(slot), 5, len(e.raw))
    return f.fileno(), [(Rec("r1", "agent:a", ("t",), (v,)), v)], f


@native
def test_a_put_in_the_canonical_layout_is_served_by_both(tmp_path: Path) -> None:
    fd, items, f = _put_file(tmp_path, {})
    with f:
        packed = pack_record_fields("hello", ["t"], {})
        assert readpath.read_served(fd, items) == [packed]
        assert [bytes(p) for p in quick_packed(items, fd) if p is not None] == [packed]


@native
def test_a_put_in_another_layout_is_left_to_the_general_path(tmp_path: Path) -> None:
    """An entry whose body holds a key no put is written with decodes all the same, and the twin serves
    it; the C path does not read that layout and answers None, so the general path (read_packed, the
    twin's checks) decides."""
    fd, items, f = _put_file(tmp_path, {"note": "extra"})
    with f:
        assert readpath.read_served(fd, items) == [None]
        assert [bytes(p) for p in quick_packed(items, fd) if p is not None] == [pack_record_fields("hello", ["t"], {})]


def test_an_entry_of_another_record_is_refused_by_both(tmp_path: Path) -> None:
    fd, items, f = _put_file(tmp_path, {}, rec_id="r2")
    with f:
        assert quick_packed(items, fd) == [None]
        if readpath is not None:
            assert readpath.read_served(fd, items) == [None]


@native
def test_a_staged_version_and_a_slot_past_the_end_are_none_in_both(tmp_path: Path) -> None:
    fd, items, f = _put_file(tmp_path, {})
    with f:
        rec, v = items[0]
        odd = [(rec, v._replace(slot_off=-1)), (rec, v._replace(entry_off=-1)), (rec, v._replace(slot_len=20)),
               (rec, v._replace(slot_len=v.slot_len + 1)), (rec, v._replace(hash=b"short")), (rec, v)]
        assert readpath.read_served(fd, odd) == [None, None, None, None, None, pack_record_fields("hello", ["t"], {})]
        assert [p is None for p in quick_packed(odd, fd)] == [True, True, True, True, True, False]


@native
def test_the_c_read_path_raises_what_os_pread_raises(tmp_path: Path) -> None:
    fd, items, f = _put_file(tmp_path, {})
    f.close()  # its descriptor is closed now
    with pytest.raises(OSError) as mine:
        readpath.read_served(fd, items)
    with pytest.raises(OSError) as twin:
        quick_packed(items, fd)
    assert mine.value.errno == twin.value.errno
    with pytest.raises(TypeError, match="each item must be a \\(Rec, Version\\) pair"):
        readpath.read_served(0, [("not", "a pair", "at all")])


def test_find_sorted_finds_each_id_and_nothing_else() -> None:
    ids = sorted(f"{i:04d}" for i in range(0, 200, 3))
    blob = "".join(ids).encode()
    searches = [find_sorted] + ([readpath.find_sorted] if readpath is not None else [])
    for search in searches:
        assert [search(blob, 4, i.encode()) for i in ids] == list(range(len(ids)))
        assert [search(blob, 4, k) for k in (b"0001", b"9999", b"", b"00000", b"0000"[:3])] == [-1, -1, -1, -1, -1]
        with pytest.raises(ValueError, match="the blob must hold whole ids of a positive width"):
            search(blob + b"x", 4, b"0000")
        with pytest.raises(ValueError, match="the blob must hold whole ids of a positive width"):
            search(blob, 0, b"")
    packed = SortedIds.pack(ids)
    assert packed is not None and [packed.find(i) for i in ids] == list(range(len(ids)))


@native
def test_the_read_path_survives_a_brief_fuzzing_run(tmp_path: Path) -> None:
    guided, sanitized = fuzz(tmp_path, 300, 300, "readpath", unit="runs")
    assert guided.runs >= 300 and sanitized.runs >= 300
    assert guided.corpus > 4  # it found inputs beyond the seeds
