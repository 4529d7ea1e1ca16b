"""The file backend's read path in C (mnemo/_readpath.c) against its pure-Python twins: read_served
serves exactly what reads.quick_packed serves from a real log (every version of every record, in frames
of one entry and of several), refuses what the twin refuses (a payload rewritten with its checksum
recomputed, an entry of another record), leaves to the general path a put it does not read (which the
general path then serves or refuses), and raises OSError where os.pread does; read_latest builds the
records reads.latest_records builds, field for field and type for type, whatever the packed fields and
the times hold, or leaves them to the general path; the index's look-ups (find_row, recs_at, and
gather_rows with read_gathered, which build a row's record without its Rec) give what their twins give;
find_sorted finds what index_columns.find_sorted finds. A brief fuzzing run compares them on mutated
inputs (the long one is in tests/soak). Under MNEMO_PURE_PYTHON=1 the C extension is not loaded: the
tests that call it are skipped, and the rest run on the twin."""

from __future__ import annotations

import errno
import hashlib
import os
import zlib
from array import array
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from helpers.frames import put_slots
from helpers.native_fuzz import fuzz
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemo import IntegrityError, MemoryRecord, MnemoClient
from mnemo._native import readpath
from mnemo.chain.codec import make_entry, pack_record_fields, packb, payload_digest
from mnemo.record import written_record, written_record_twin
from mnemo.storage.file.index_columns import SortedIds, find_sorted
from mnemo.storage.file.opening import log_file_state
from mnemo.storage.file.reads import gather_rows, latest_records, quick_packed, read_gathered
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


def _put_file(tmp_path: Path, body_extra: dict[str, Any], rec_id: str = "r1",
              packed: bytes | None = None) -> tuple[int, list[Any], Any]:
    """A file holding one put's entry and its slot, adjacent; (fd, items, file)."""
    salt = b"s" * 16
    packed = pack_record_fields("hello", ["t"], {}) if packed is None else packed
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


@native
def test_the_c_read_path_builds_the_records_its_twin_builds_from_a_real_log(tmp_path: Path) -> None:
    with _log_of_every_kind(tmp_path / "r.db") as c:
        store: Any = c._store
        index = store.index
        recs = [index.rec_at(row) for row in index.live_rows()]
        handle = store._handles.acquire()
        try:
            got = readpath.read_latest(handle.fd, recs, MemoryRecord)
            want = latest_records(recs, handle.fd)
        finally:
            store._handles.release(handle)
        assert len(recs) == 6 and all(w is not None for w in want)
        assert [repr(g) for g in got] == [repr(w) for w in want]
        assert got == [c.get(rec.id) for rec in recs]
        updated = next(g for g in got if g.version == 2)
        assert updated.created_at < updated.updated_at  # the first version's time, and this one's
        first = next(g for g in got if g.content == "alone in its frame")
        assert first.created_at is first.updated_at  # one datetime for both (immutable)


@native
def test_the_index_look_ups_in_c_give_what_their_twins_give(tmp_path: Path) -> None:
    """find_row finds the live row row_of_twin finds (a row of the snapshot's sorted ids, one after
    them, none for a forgotten, a missing or an odd id); recs_at makes the Rec tuples recs_at_twin makes
    (an updated record with its earlier versions), types and all; a row the tables do not hold whole
    (a row or a code out of range, a freed tag set) is None there, and IntegrityError from rec_at, as
    from its twin."""
    db = tmp_path / "r.db"
    with _log_of_every_kind(db):
        pass
    with MnemoClient(db, OWNER, durability="none") as c:  # reopened from its snapshot: rows in the sorted ids
        gone = c.remember("to be forgotten", tags=["gone"]).id
        late = c.remember("after the snapshot", tags=["late"]).id
        store: Any = c._store
        index = store.index
        gone_row = index.row_of(gone)
        c.forget(gone)
        first = index.id_at(0)
        assert index.base.n == 6 and first is not None
        for rec_id in (first, late, gone, "0" * len(first), "z" * len(first), "", "é" * len(first), first + "x"):
            assert readpath.find_row(index.rows, index.base.blob, index.base.width, index.base_dead, rec_id) == \
                index.row_of_twin(rec_id)
        assert index.row_of(first) == 0 and index.row_of(gone) is None and index.row_of(late) == 7
        hits = [(rec_id, row) for row in index.live_rows() for rec_id in [index.id_at(row)] if rec_id is not None]
        recs = readpath.recs_at(*index.tables(), hits, Rec, Version)
        assert recs == index.recs_at_twin(hits) == index.recs_at(hits)
        assert [type(r) for r in recs] == [Rec] * 7 and all(type(v) is Version for r in recs for v in r.versions)
        assert sorted(len(r.versions) for r in recs) == [1] * 6 + [2]
        assert readpath.recs_at(*index.tables(), [(gone, len(index.cols["ver"])), (gone, 2**70)], Rec, Version) == \
            [None, None]
        row = hits[0][1]
        for column in ("scope", "agent", "tagset"):
            kept = index.cols[column][row]
            index.cols[column][row] = 10_000
            try:
                assert readpath.recs_at(*index.tables(), hits[:1], Rec, Version) == [None]
                for rec_at in (index.rec_at, index.rec_at_twin):
                    with pytest.raises(IntegrityError, match=f"the index snapshot is inconsistent \\(row {row}\\)"):
                        rec_at(row, hits[0][0])
            finally:
                index.cols[column][row] = kept
        assert gone_row is not None
        with pytest.raises(TypeError, match="column ver is not an array of type I"):
            readpath.recs_at({**index.cols, "ver": array("q")}, *index.tables()[1:], hits, Rec, Version)
        with pytest.raises(TypeError, match="each hit must be an \\(id, row\\) pair"):
            readpath.recs_at(*index.tables(), [(row, "id")], Rec, Version)


@native
def test_a_gathered_read_builds_from_the_index_what_its_twin_builds(tmp_path: Path) -> None:
    """gather_rows takes each row's latest version from the index's columns (no Rec made) and
    read_gathered builds from it the record read_latest builds from the row's Rec: for every live row
    (an updated one's created_at is its first version's time), read again alike; a forgotten row's hit
    (its slot erased) and rows the tables do not hold whole are None, as in the twins; the records are
    those get serves."""
    with _log_of_every_kind(tmp_path / "r.db") as c:
        doomed = c.remember("to be forgotten", tags=["gone"]).id
        store: Any = c._store
        index = store.index
        gone_row = index.row_of(doomed)
        c.forget(doomed)
        hits = [(rec_id, row) for row in index.live_rows() for rec_id in [index.id_at(row)] if rec_id is not None]
        bad = [(doomed, gone_row), ("r-none", len(index.cols["ver"])), ("r-huge", 2**70), ("r-neg", -1)]
        handle = store._handles.acquire()
        try:
            gathered = readpath.gather_rows(*index.tables(), hits + bad)
            got = readpath.read_gathered(handle.fd, gathered, MemoryRecord)
            again = readpath.read_gathered(handle.fd, gathered, MemoryRecord)
            want = read_gathered(gather_rows(index, hits + bad), handle.fd)
            latest = readpath.read_latest(handle.fd, index.recs_at(hits), MemoryRecord)
        finally:
            store._handles.release(handle)
        assert len(hits) == 6 and all(w is not None for w in want[:6]) and want[6:] == [None] * 4
        assert [repr(g) for g in got] == [repr(a) for a in again] == [repr(w) for w in want] == \
            [repr(x) for x in latest] + ["None"] * 4
        assert got[:6] == [c.get(rec_id) for rec_id, _row in hits]
        updated = next(g for g in got if g is not None and g.version == 2)
        assert updated.created_at < updated.updated_at
        with pytest.raises(TypeError, match="each hit must be an \\(id, row\\) pair"):
            readpath.gather_rows(*index.tables(), [(1, 2)])
        with pytest.raises(ValueError):
            readpath.read_gathered(0, "not gathered", MemoryRecord)


_PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text(max_size=40)
    | st.binary(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=12,
)
_ODD = st.recursive(  # what a put's fields never hold, but msgpack decodes: the general path builds it
    _PLAIN | st.builds(lambda: b"\xd4\x01\x00"),  # (an ext type, spliced in as raw bytes below)
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.integers(0, 3), inner, max_size=2),
    max_leaves=6,
)
_TIMES = st.integers(-(2**63), 2**63 - 1) | st.integers(-(2**31) * 10**9, 2**32 * 10**9) | st.sampled_from(
    [0, -1, -999, -1000, -1001, 1_764_500_000_123_456_789, 2**31 * 10**9 - 1, 2**31 * 10**9, 253402300799999999999])


@native
@settings(max_examples=300, deadline=None)
@given(st.tuples(st.text(max_size=20) | st.binary(max_size=20) | _ODD, st.lists(st.text(max_size=3)) | _ODD,
                 st.dictionaries(st.text(max_size=3), _PLAIN) | _ODD) | _ODD, _TIMES, _TIMES)
def test_read_latest_builds_what_its_twin_builds_whatever_the_fields_and_times(
    tmp_path_factory: pytest.TempPathFactory, fields: Any, ts: int, first_ts: int
) -> None:
    """A record from C is the twin's record, type for type (by repr: True is not 1, 1.0 is not 1); None
    only where the general path decides: fields not decoded here (an ext type, a key that is not a
    str), fields of the wrong types, or a time beyond what datetime holds or near it."""
    value = list(fields) if isinstance(fields, tuple) else fields
    packed = packb(value)
    fd, items, f = _put_file(tmp_path_factory.mktemp("f"), {}, packed=packed)
    with f:
        rec, v = items[0]
        v = v._replace(ts_ns=ts)
        rec = rec._replace(versions=(v._replace(ver=0, ts_ns=first_ts), v))
        got = readpath.read_latest(fd, [rec], MemoryRecord)[0]
        try:
            want = latest_records([rec], fd)[0]
        except (ValueError, OverflowError, OSError):  # datetime cannot hold the time: the general path raises
            want = None
    if got is not None:
        assert repr(got) == repr(want) and type(got.content) is type(want.content)
        assert [type(x) for x in got.tags] == [type(x) for x in want.tags]
    elif want is not None:  # left to the general path: what read_latest does not decode
        assert b"\xd4" in packed or any(type(k) is not str for k in _keys(value)) or abs(ts // 1000) >= 2**53 or \
            abs(first_ts // 1000) >= 2**53


def _keys(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value) + [k for v in value.values() for k in _keys(v)]
    if isinstance(value, list):
        return [k for v in value for k in _keys(v)]
    return []


@native
def test_read_latest_decodes_every_width_msgpack_writes(tmp_path: Path) -> None:
    """Each encoding of each kind a put's fields may hold (fixed, 8, 16, 32 and 64 bits; float 32 and
    64; str, bin, array and map of each length width), and a key given twice (the last value wins, as
    in msgpack): the record C builds is the twin's."""
    import msgpack

    values: list[Any] = [0, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1, -1, -32, -33, -128,
                         -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63), 1.5, -0.0, float("inf"),
                         "", "x" * 31, "x" * 32, "y" * 255, "y" * 256, "z" * 65536, b"", b"b" * 256, b"c" * 65536,
                         list(range(15)), list(range(16)), list(range(65536)), {str(i): i for i in range(16)},
                         {str(i): i for i in range(65536)}, None, True, False]
    metadata = {f"k{i}": v for i, v in enumerate(values)}
    single = msgpack.packb(3.25, use_single_float=True)
    for packed in (packb(["text", ["a", "b"], metadata]), packb([b"bin", [], {}]),
                   b"\x93\xa1x\x90\x81\xa1k" + single, b"\x93\xa1x\x90\x82\xa1k\x01\xa1k\x02",
                   b"\x93\xa1x\xdc\x00\x01\xa1t\xde\x00\x00"):
        fd, items, f = _put_file(tmp_path, {}, packed=packed)
        with f:
            rec = items[0][0]
            got = readpath.read_latest(fd, [rec], MemoryRecord)[0]
            want = latest_records([rec], fd)[0]
        assert got is not None and repr(got) == repr(want)


@native
def test_read_latest_leaves_to_the_general_path_what_it_does_not_read(tmp_path: Path) -> None:
    """None (the general path then decides) for fields that are not an array of 3, hold the wrong
    types, bytes after the array, a str that is not UTF-8, an ext type, or nesting deeper than 32; and
    for whatever read_served refuses. The general path's twin says the same or builds the record."""
    deep: Any = []
    for _ in range(40):
        deep = [deep]
    cases = [packb(["a", []]), packb([1, [], {}]), packb(["a", {}, {}]), packb(["a", [], []]),
             packb(["a", [], {}]) + b"\xc0", b"\x93\xa2\xff\xfe\x90\x80", b"\x93\xa1x\x90\x81\xa1k\xd4\x01\x00",
             packb(["a", [], {"d": deep}]), b"\x93\xa1x\x91\xc1\x80", b"\xdc\x00\x03\xa1x\x90\x80"]
    for packed in cases:
        fd, items, f = _put_file(tmp_path, {}, packed=packed)
        with f:
            rec = items[0][0]
            assert readpath.read_latest(fd, [rec], MemoryRecord) == [None]
    fd, items, f = _put_file(tmp_path, {}, rec_id="r2")  # an entry of another record
    with f:
        assert readpath.read_latest(fd, [items[0][0]], MemoryRecord) == [None] == latest_records([items[0][0]], fd)
    with pytest.raises(TypeError, match="each item must be a Rec"):
        readpath.read_latest(0, [("not", "a rec")], MemoryRecord)


def test_file_state_tells_the_file_at_the_path_and_the_size_of_the_one_open(tmp_path: Path) -> None:
    """What refresh looks at: the identity of the file a path names ((-1, -1) if it names none) and the
    size of the one a descriptor holds, which differ once another file is renamed over the path; an
    error of stat other than a missing file, and one of fstat, raise what os.stat and os.fstat raise."""
    log, other = tmp_path / "log", tmp_path / "other"
    log.write_bytes(b"x" * 10)
    states = [log_file_state] + ([readpath.file_state] if readpath is not None else [])
    with log.open("rb") as f:
        st = os.stat(log)
        for state in states:
            assert state(str(log), f.fileno()) == (st.st_ino, st.st_dev, 10)
        other.write_bytes(b"y" * 3)
        moved = os.stat(other)
        os.replace(other, log)
        for state in states:
            assert state(str(log), f.fileno()) == (moved.st_ino, moved.st_dev, 10)
            assert state(str(tmp_path / "none"), f.fileno()) == (-1, -1, 10)
            with pytest.raises(NotADirectoryError) as info:
                state(str(log / "below"), f.fileno())
            assert info.value.filename == str(log / "below")
        fd = f.fileno()
    for state in states:
        with pytest.raises(OSError) as closed:
            state(str(log), fd)
        assert closed.value.errno == errno.EBADF


@native
@settings(max_examples=300, deadline=None)
@given(st.integers(-(2**62), 2**62), st.integers(-(2**62), 2**62), st.integers(1, 2**32), st.binary(max_size=40))
def test_made_record_builds_the_record_a_write_returns_as_its_twin_does(
    created: int, ts: int, ver: int, entry_hash: bytes
) -> None:
    fields = ("r1", ver, "ünï", ("a", "b"), {"k": 1}, "agent:a", "a", created, ts, 7, entry_hash)
    try:
        want: Any = written_record_twin(*fields)
    except (OverflowError, ValueError, OSError) as exc:  # a time out of datetime's range
        want = type(exc)
    try:
        got: Any = readpath.made_record(MemoryRecord, *fields)
    except (OverflowError, ValueError) as exc:
        got = type(exc)
    if not isinstance(got, type):
        assert type(got) is MemoryRecord and vars(got) == vars(want)
        assert list(vars(got)) == list(vars(want))
        assert (got.created_at is got.updated_at) == (ver == 1)
    try:
        assert written_record(*fields) == want
    except (OverflowError, ValueError, OSError) as exc:
        assert type(exc) is want


def test_written_record_is_the_record_of_a_write() -> None:
    record = written_record("r1", 2, b"c", ("t",), {}, "agent:a", "a", 1_700_000_000_123_456_789,
                            1_800_000_000_000_001_999, 9, b"\x01\xab")
    assert vars(record) == vars(MemoryRecord(
        "r1", 2, b"c", ("t",), {}, "agent:a", "a", datetime(2023, 11, 14, 22, 13, 20, 123456, timezone.utc),
        datetime(2027, 1, 15, 8, 0, 0, 1, timezone.utc), 9, "01ab"))
    first = written_record("r1", 1, "c", (), {}, "s", "a", 0, 1_800_000_000_000_001_999, 9, b"")
    assert first.created_at is first.updated_at and first.hash == ""


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


@pytest.mark.slow  # with the sanitized build it needs; .ci/run runs it (-m slow)
@native
def test_the_read_path_survives_a_brief_fuzzing_run(tmp_path: Path) -> None:
    guided, sanitized = fuzz(tmp_path, 300, 300, "readpath", unit="runs")
    assert guided.runs >= 300 and sanitized.runs >= 300
    assert guided.corpus > 4  # it found inputs beyond the seeds
